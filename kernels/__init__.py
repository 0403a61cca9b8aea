"""capsim_kernels: GPU kernels and measurements for GDN speculative verification.

Importing this package runs nothing on a device; Triton compiles on first call.
"""

from .gdn_verify import (
    DEFAULT_POLICY,
    LaunchPolicy,
    PendingCommit,
    TreeSpec,
    chain_parent,
    commit_reference,
    conv_state_commit_reference,
    conv_tree_commit,
    conv_tree_reference,
    conv_tree_update,
    parent_from_widths,
    recurrence_reference,
    storeall_verify,
    treewy_commit,
    treewy_deferred_verify,
    treewy_fused_verify_commit,
    treewy_reference,
    treewy_verify,
    validate_parent,
)

__all__ = [
    "DEFAULT_POLICY",
    "LaunchPolicy",
    "PendingCommit",
    "TreeSpec",
    "chain_parent",
    "commit_reference",
    "conv_state_commit_reference",
    "conv_tree_commit",
    "conv_tree_reference",
    "conv_tree_update",
    "parent_from_widths",
    "recurrence_reference",
    "storeall_verify",
    "treewy_commit",
    "treewy_deferred_verify",
    "treewy_fused_verify_commit",
    "treewy_reference",
    "treewy_verify",
    "validate_parent",
]
