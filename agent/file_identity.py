"""When a file may have changed without reading it: the key the agent's caches of program
digests, ``#!`` lines and library lookups are kept by (program_id.py, shared_libs.py,
workloads.py)."""

from __future__ import annotations

import os


def file_key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """(device, inode, size, mtime, ctime): what says a file may have changed. The inode
    change time too: a same-size write in place whose mtime was set back (``touch -r``, a
    build or copy that keeps timestamps, FAT's 2 s) leaves the other four as they were, and
    no user can set it; a chmod or a new link changes it as well, which costs a hash again,
    not a new program."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
