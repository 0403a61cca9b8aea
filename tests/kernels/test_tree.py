"""Tree shapes: DFS parent arrays, sizes and validation."""

from __future__ import annotations

import pytest
from capsim_kernels.gdn_verify.tree import (
    TreeSpec,
    ancestors,
    chain_parent,
    depths,
    parent_from_widths,
    validate_parent,
)


@pytest.mark.parametrize(
    ("widths", "num_nodes"),
    [((1, 1, 1), 4), ((2, 2, 1), 11), ((2, 2, 2), 15), ((3, 3, 3), 40), ((3, 1, 2), 13)],
)
def test_window_sizes_match_spec(widths, num_nodes):
    spec = TreeSpec(widths)
    assert spec.num_nodes == num_nodes
    assert len(spec.parent) == num_nodes
    validate_parent(spec.parent)


def test_small_tree_is_dfs_preorder():
    # root -> a(1) -> a1(2), a2(3); root -> b(4) -> b1(5), b2(6)
    assert parent_from_widths((2, 2)) == (-1, 0, 1, 1, 0, 4, 4)
    assert depths((-1, 0, 1, 1, 0, 4, 4)) == (0, 1, 2, 2, 1, 2, 2)
    assert ancestors((-1, 0, 1, 1, 0, 4, 4), 6) == (0, 4, 6)


def test_chain():
    assert chain_parent(4) == (-1, 0, 1, 2)
    assert TreeSpec((1, 1, 1)).is_chain
    assert TreeSpec((1, 1, 1)).label == "chain"
    assert TreeSpec((2, 2, 2)).label == "2,2,2"
    assert TreeSpec.parse("chain", 5).num_nodes == 5
    assert TreeSpec.parse("3,3,3").num_nodes == 40


@pytest.mark.parametrize(
    ("parent", "fragment"),
    [
        ((), "at least the root"),
        ((0, 0), r"parent\[0\] must be -1"),
        ((-1, 1), r"parent\[1\] must be in \[0, 1\)"),
        ((-1, 0, 2), r"parent\[2\] must be in \[0, 2\)"),
        # node 3's parent 1 is not on the path (0, 2) of node 2 after 2 left 1's subtree
        ((-1, 0, 0, 1), "not in DFS preorder"),
    ],
)
def test_bad_parent_arrays_raise(parent, fragment):
    with pytest.raises(ValueError, match=fragment):
        validate_parent(parent)


@pytest.mark.parametrize("widths", [(0,), (2, -1), (1.5,)])
def test_bad_widths_raise(widths):
    with pytest.raises(ValueError, match="widths"):
        TreeSpec(widths)


def test_bad_parse_raises():
    with pytest.raises(ValueError, match="tree must be"):
        TreeSpec.parse("two,two")
    with pytest.raises(ValueError, match="num_nodes"):
        TreeSpec.parse("chain")
