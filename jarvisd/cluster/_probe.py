"""What the Ray cluster's live nodes have: run as ``python -m jarvisd.cluster._probe
ADDRESS``, it prints their total resources and labels as one JSON list (``NodeInfo``) (exit 1 and the reason on
stderr when the cluster cannot be reached). A child process, so the daemon never
imports Ray; the ray backend caches its answer (``RayBackend.check``)."""

from __future__ import annotations

import json
import os
import sys

from ._placement import NodeInfo
from ._relay import connect, keep_loopback

#: A submit waits for this probe (once per few seconds): it gives up sooner than a run.
PROBE_CONNECT_S = 10.0


def main(argv: list[str]) -> int:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # Ray's own output is not the answer
    keep_loopback(argv[0])
    why = connect(argv[0], PROBE_CONNECT_S)
    if why:
        print(why, file=sys.stderr)
        return 1
    import ray

    try:
        nodes = [NodeInfo.from_ray(n).to_dict() for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
    except Exception as exc:
        print(f"the Ray cluster at {argv[0]} did not list its nodes: {exc}", file=sys.stderr)
        return 1
    out.write(json.dumps(nodes))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv[1:]))
