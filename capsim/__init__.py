"""capsim: serving-capacity simulator for speculative decoding in GDN hybrid LLMs."""

__version__ = "0.1.0"
