"""Price table: shipped rows are cited list prices; overrides; the arithmetic; bad rows."""

from __future__ import annotations

import math

import pytest

from capsim.plan.prices import fleet_usd_per_hour, load_prices, price_for, usd_per_mtok


def test_shipped_rows_are_cited_list_prices():
    prices = load_prices()
    for g in ("H100", "H200", "B200"):
        p = prices[g]
        assert p.kind == "list"
        assert p.source_url.startswith("https://")
        assert p.retrieved and p.note
    # RunPod's flex per-second rates x 3600 (the note says which number)
    assert prices["H200"].usd_per_gpu_hour == pytest.approx(0.00155 * 3600)


def test_arithmetic():
    assert fleet_usd_per_hour(3, 2, 5.0) == 30.0
    # 30 $/h at 1000 output tok/s = 3.6 Mtok/h -> 8.333 $/Mtok
    assert usd_per_mtok(30.0, 1000.0) == pytest.approx(30.0 / 3.6)
    assert math.isinf(usd_per_mtok(30.0, 0.0))


def test_override_replaces_by_gpu(tmp_path):
    f = tmp_path / "p.csv"
    f.write_text("gpu,usd_per_gpu_hour\nh200,2.5\n")
    prices = load_prices(f)
    assert prices["H200"].usd_per_gpu_hour == 2.5 and prices["H200"].kind == "user"
    assert prices["B200"].kind == "list"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("gpu,usd_per_gpu_hour\nH999,2\n", "gpu='H999' is unknown"),
        ("gpu,usd_per_gpu_hour\nH200,abc\n", "usd_per_gpu_hour='abc'"),
        ("gpu,usd_per_gpu_hour\nH200,-1\n", r"usd_per_gpu_hour=-1.0"),
        ("gpu,price\nH200,1\n", "needs columns"),
    ],
)
def test_bad_rows_name_the_field(tmp_path, text, match):
    f = tmp_path / "p.csv"
    f.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_prices(f)


def test_unpriced_gpu_names_it():
    with pytest.raises(ValueError, match="gpu='H20': no price"):
        price_for(load_prices(), "H20")
