"""Cross-checks of capsim against a live vLLM engine (issue #7).

- ``scenarios``: request sets both sides run step by step;
- ``venv``: the isolated vLLM CPU environment (experiments/live/setup_env.sh) and how to
  call into it;
- ``stepcheck``: replay a recorded vLLM trace on capsim's scheduler and compare;
- ``server``: start/stop a vLLM CPU server from the live venv on 127.0.0.1;
- ``prom``, ``client``, ``workload``: scrape ``/metrics`` and drive an OpenAI-compatible
  server with a capsim workload;
- ``steptime``, ``crosscheck``: step times fitted to the live engine, predicted vs observed;
- ``cli``: click commands ``live``, ``crosscheck`` and ``stepcheck``.
"""
