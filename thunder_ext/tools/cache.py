"""``thunder-ext cache``: the compile cache's entries (what was compiled, for which arguments, its size, when last
used); ``thunder-ext cache clear`` removes them all."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from thunder_ext.compile_cache import store


def main(argv: Sequence[str] | None = None, prog: str = "python -m thunder_ext.tools.cache") -> None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.replace("``", "`"))
    parser.add_argument("action", nargs="?", choices=["list", "clear"], default="list")
    args = parser.parse_args(argv)
    where = store.folder()
    if args.action == "clear":
        print(f"removed {store.clear()} entries from {where}")
        return
    found = store.every_entry()
    state = "on (THUNDER_EXT_CACHE=1)" if store.enabled() else "off unless THUNDER_EXT_CACHE=1 or compile_cache=True"
    total = sum(s.size for s in found) / 2**20
    print(f"compile cache: {where}, {state}; {len(found)} entries, {total:.1f} MB of at most "
          f"{store.max_bytes() / 2**20:.0f} MB (THUNDER_EXT_CACHE_MAX_MB)")  # fmt: skip
    for s in reversed(found):  # most recently used first
        print(f"  {s.payload.get('describe', '?')}  {s.size / 2**20:.2f} MB, used {store.age(s.last_used)} ago  "
              f"[{s.path.parent.name[:8]}/{s.path.name[:8]}]")  # fmt: skip


if __name__ == "__main__":
    main()
