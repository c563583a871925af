"""vllm-ascend's DSA-CP draft metadata (point "dsa_cp_draft"): to be filled."""


def points(Point, Patch):
    return ()
