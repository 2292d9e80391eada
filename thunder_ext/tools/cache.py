"""``thunder-ext cache``: the compile cache's entries (what was compiled, for which arguments, its size, when last
used) and the files no compilation reads, removing nothing; ``thunder-ext cache clear`` removes them all."""

from __future__ import annotations

import os
from collections.abc import Sequence

from thunder_ext.tools.extras import check_cache_settings, fail
from thunder_ext_cli import cache_parser


def main(argv: Sequence[str] | None = None, prog: str = "python -m thunder_ext.tools.cache") -> None:
    parser = cache_parser(prog)
    args = parser.parse_args(argv)
    check_cache_settings(parser, uses_cache=False)  # a folder the cache refuses is what this command reports
    from thunder_ext.compile_cache import store  # imports thunder: not for --help

    where, refused = store.folder(), store.refusal()
    if args.action == "clear":
        if refused is not None:  # it may hold another user's files
            fail(parser, f"nothing removed: {refused}")
        print(f"removed {store.clear()} entries from {where}")
        return
    if refused is not None:
        print(f"compile cache: off: {refused}")
        return
    found, damaged = store.inventory()
    total = sum(s.size for s in found) / 2**20
    print(f"compile cache: {where}, {state(store.enabled())}; {len(found)} entries, {total:.1f} MB of at most "
          f"{store.max_bytes() / 2**20:.0f} MB (THUNDER_EXT_CACHE_MAX_MB)")  # fmt: skip
    for s in reversed(found):  # most recently used first
        print(f"  {s.payload.get('describe', '?')}  {s.size / 2**20:.2f} MB, used {store.age(s.last_used)} ago  "
              f"[{s.path.parent.name[:8]}/{s.path.name[:8]}]")  # fmt: skip
    if damaged:
        print(f"{len(damaged)} entry file(s) that no compilation reads (a compilation that meets one of yours "
              f"removes it; {parser.prog} clear removes all):")  # fmt: skip
        for path, why in damaged:
            print(f"  {path}: {why}")


def state(on: bool) -> str:
    """Whether the cache is on, and which setting says so: where it is off, how to turn it on."""
    value = os.environ.get("THUNDER_EXT_CACHE", "").strip()
    if on:
        return f"on (THUNDER_EXT_CACHE={value})" if value else "on (the default; THUNDER_EXT_CACHE=0 turns it off)"
    if value.lower() == "opt-in":
        return ("off (THUNDER_EXT_CACHE=opt-in: on only where a compilation asks, thunder_ext.jit(..., "
                "compile_cache=True); unset, it is on for all)")  # fmt: skip
    return f"off (THUNDER_EXT_CACHE={value}: for every compilation, compile_cache=True included)"


if __name__ == "__main__":
    main()
