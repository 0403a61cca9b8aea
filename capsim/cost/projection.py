"""Project measured H200 operator times to another GPU through an explicit hardware model.

Hardware model (per measured point, before any interpolation)::

    floor_g   = max(flops / F_g, bytes / BW_g)          # roofline floor on GPU g
    fixed     = the fastest call measured in the point's op class (launch + latency)
    t_target  = min(t, fixed) + max(t - fixed, 0) * floor_target / floor_source

so the part of a call above the class's latency floor keeps the efficiency it reached
on the H200 and scales with the roofline floor of the target: by the bandwidth ratio
where the point is memory-bound, by the FLOP/s ratio where it is compute-bound, with the
bound-ness re-evaluated on the target. F and BW are the datasheet figures of
``capsim.gpus`` (B200: 8 TB/s HBM3e, 2.25 PFLOP/s dense BF16; H200: 4.8 TB/s, 989
TFLOP/s; H100 SXM: 3.35 TB/s, 989 TFLOP/s; sources recorded there). Host-side work (the
``host`` class) is not scaled: it runs on the CPU. Points without a FLOP count (the GDN
kernel CSV records bytes only) are treated as memory-bound.

Not modelled: clock and cache differences (L2 sizes), new instructions (FP4, TMEM),
kernel re-tuning for the target. Every output that uses this is labelled a projection.
"""

from __future__ import annotations

from dataclasses import dataclass

from capsim.gpus import GpuSpec

UNSCALED_OPS: frozenset[str] = frozenset({"host"})


@dataclass(frozen=True, slots=True)
class HardwareProjection:
    """Maps a measured time on ``source`` to a projected time on ``target``."""

    source: GpuSpec
    target: GpuSpec

    @property
    def label(self) -> str:
        return (
            f"PROJECTION {self.source.name}->{self.target.name}: measured {self.source.name} "
            f"times scaled by roofline floors (bandwidth x"
            f"{self.bandwidth_ratio:.3f}, bf16 FLOP/s x{self.flops_ratio:.3f}); not measured"
        )

    @property
    def bandwidth_ratio(self) -> float:
        """Target over source HBM bandwidth."""
        return self.target.hbm_bandwidth_bytes_per_s / self.source.hbm_bandwidth_bytes_per_s

    @property
    def flops_ratio(self) -> float:
        return self.target.dense_bf16_flop_per_s / self.source.dense_bf16_flop_per_s

    def floor_ratio(self, flops: float, bytes_: float) -> float:
        """floor_target / floor_source of one point (1.0 where both floors are zero)."""
        src = max(
            flops / self.source.dense_bf16_flop_per_s,
            bytes_ / self.source.hbm_bandwidth_bytes_per_s,
        )
        dst = max(
            flops / self.target.dense_bf16_flop_per_s,
            bytes_ / self.target.hbm_bandwidth_bytes_per_s,
        )
        return dst / src if src > 0 else 1.0

    def project_us(
        self, op: str, t_us: float, flops: float, bytes_: float, fixed_us: float
    ) -> float:
        if t_us < 0 or fixed_us < 0:
            raise ValueError(f"projection: t_us={t_us} and fixed_us={fixed_us} must be >= 0")
        if op in UNSCALED_OPS:
            return t_us
        return min(t_us, fixed_us) + max(t_us - fixed_us, 0.0) * self.floor_ratio(flops, bytes_)

    def describe(self) -> dict[str, object]:
        return {
            "label": self.label,
            "source": self.source.name,
            "target": self.target.name,
            "bandwidth_ratio": self.bandwidth_ratio,
            "flops_ratio": self.flops_ratio,
            "target_sources": list(self.target.sources),
            "source_sources": list(self.source.sources),
            "unscaled_ops": sorted(UNSCALED_OPS),
        }


def class_fixed_us(rows: list[dict], time_key: str = "p50_us", op_key: str = "op") -> dict:
    """Per op class, the fastest measured call: the part of a call that does not scale."""
    fixed: dict[str, float] = {}
    for row in rows:
        op = row[op_key]
        fixed[op] = min(fixed.get(op, float("inf")), row[time_key])
    return fixed
