"""`python -m specops.integrations.vllm [fingerprints]`: the plugin's status here, or the
fingerprints of the installed vLLM's targets (to regenerate _fingerprints.py for a release the
adapters were checked against)."""

from __future__ import annotations

import sys

from specops.integrations.vllm import POINT_NAMES, activate, release_points


def main() -> None:
    if sys.argv[1:] == ["fingerprints"]:
        from specops.integrations.vllm._guard import fingerprint, release

        targets = sorted({target for p in release_points() for target in p.targets})
        print(f"    {release()!r}: {{")
        for target in targets:
            print(f"        {target!r}: {fingerprint(target)!r},")
        print("    },")
        return
    status = activate({"SPECOPS_VLLM": ",".join(POINT_NAMES)} if sys.argv[1:] == ["check"] else None)
    print(f"active: {status.active}; {status.reason}")


if __name__ == "__main__":
    main()
