"""The memory wing: vLLM's start-up memory plan (terms, weights, TreeWY pending bytes,
measured terms), vLLM log parsing, and the log comparison/validation."""
