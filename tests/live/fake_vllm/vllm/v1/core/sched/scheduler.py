"""A stand-in for vLLM 0.26's Scheduler: the attributes the GPU step log reads."""

from types import SimpleNamespace


class _Pool:
    def get_num_free_blocks(self):
        return 7

    def get_usage(self):
        return 0.5


class Scheduler:
    def __init__(self):
        # one decode request (context 9, 1 new token) and one prefill chunk of 4 tokens
        self.requests = {
            "a": SimpleNamespace(num_computed_tokens=10, num_tokens=10),
            "b": SimpleNamespace(num_computed_tokens=4, num_tokens=12),
        }
        self.running, self.waiting = ["a", "b"], []
        self.kv_cache_manager = SimpleNamespace(block_pool=_Pool())

    def _preempt_request(self, request, timestamp):
        return None

    def schedule(self, throttle_prefills=False):
        self._preempt_request(None, 0.0)
        return SimpleNamespace(
            num_scheduled_tokens={"a": 1, "b": 4},
            total_num_scheduled_tokens=5,
            scheduled_spec_decode_tokens={"a": [1, 2, 3]},
            scheduled_new_reqs=[object()],
        )

    def update_from_output(self, scheduler_output, model_runner_output):
        return {}
