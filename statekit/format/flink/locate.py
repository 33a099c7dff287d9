"""Locating the entries of canonical key groups in bulk: strided runs of equal-sized entries, and chains walked together.

Boundary: bytes in, entry positions out (no value is decoded here; `keyed` does that). Per key
group (a chain): ``i16 stateId`` then ``(i32 klen, key, i32 vlen, value)*``; the last entry of a
state run has 0x80 in its first key byte and is followed by the next state id or 0xFFFF.

* ``strided``: a run of entries with one key and value size is one strided probe (doubling
  blocks) and stays a `Run` (position, count, stride), decoded later as a 2-D strided view with
  no per-entry index at all - Long keys with Long values. A chain of mostly equal-sized entries
  with a few others among them (SQL STRING keys: ``user-106`` beside ``user-1976134``) is runs
  too, the odd entries runs of their own, while they are few (`_IRREGULAR_EVERY`).
* ``chained``: entries of varying size (String keys) advance all chains together, one entry per
  numpy step over every key group at once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from statekit.errors import CorruptSavepointError
from statekit.format.flink.gather import gather_fixed

END_OF_KEY_GROUP = 0xFFFF
_PROBE = 64  # first strided probe; grown 4x while the run goes on
#: at most this many bytes of entries per strided probe: the probe reads three fields of each entry, and the second
#: and third find the bytes in cache (2 MB L2 on this machine kind) only while the block fits
_PROBE_BYTES = 1 << 19
_FEW_EXCEPTIONS = 256  # at most this many candidates off the simple chain: `_follow` walks them in Python
_PRUNE_ROUNDS = 4  # rounds of pruning stray candidates before pointer doubling
_CHUNK = 1 << 19  # bytes proven per step of the value-length scan (see `_scan_value_lengths`)
#: bytes compared at a time by `_copies_run` (its scratch stays in the core's cache)
_COPY_BLOCK_BYTES = 1 << 18
_scratch = threading.local()  # each thread's `_copies_run` scratch, kept: fresh memory per call costs page faults
_MIN_RUN = 8  # a run shorter than this is "irregular": probing it costs more than a scan would
#: a chain stays strided while it has at most `_IRREGULAR_FREE` irregular runs plus one per this many entries; past
#: that its sizes vary too often (String keys of any length) and the whole chain goes to the scan. A probe costs
#: about what the scan of ~150 entries does, and each odd entry costs two (its own run and the next).
_IRREGULAR_EVERY = 256
_IRREGULAR_FREE = 8


@dataclass
class DecodeStats:
    """How entries were located (``strided`` runs, ``scanned`` candidates, ``chained`` walk), each state decoded
    (``strided-view``, ``bulk``, ``per-record``, ``raw bytes``) and the rows formed (``table``: ``direct`` when
    every state lists the same keys in the same order, ``joined`` otherwise)."""

    strided_entries: int = 0
    strided_copied: int = 0  # of those, the entries of runs proven to repeat the first state's run (`_copies_run`)
    scanned_entries: int = 0
    value_length_scanned: int = 0  # of the scanned entries, those found by their value lengths
    copied_entries: int = 0  # of those, the entries of state runs proven to repeat the first run's layout (`_copy_run`)
    chained_entries: int = 0
    states: dict[str, str] = field(default_factory=dict)
    table: str = ""

    #: when batches of one read took different paths, the slowest is reported
    _RANK = {"strided-view": 0, "bulk": 1}

    def merge(self, other: "DecodeStats") -> None:
        """Add the counts and paths of another part of the same read (`other` decoded after `self`'s parts)."""
        self.strided_entries += other.strided_entries
        self.strided_copied += other.strided_copied
        self.scanned_entries += other.scanned_entries
        self.value_length_scanned += other.value_length_scanned
        self.copied_entries += other.copied_entries
        self.chained_entries += other.chained_entries
        for label, how in other.states.items():
            seen = self.states.get(label)
            if seen is None or self._RANK.get(how, 2) >= self._RANK.get(seen, 2):
                self.states[label] = how
        if other.table:
            self.table = "joined" if "joined" in (self.table, other.table) else other.table

    def describe(self) -> str:
        copied = f", {self.copied_entries} of them as copies of a proven state run" if self.copied_entries else ""
        by = f" ({self.value_length_scanned} by value length{copied})" if self.value_length_scanned else ""
        strided = f" ({self.strided_copied} as copies of a proven state run)" if self.strided_copied else ""
        where = (f"entries located: {self.strided_entries} strided{strided}, {self.scanned_entries} scanned{by}, "
                 f"{self.chained_entries} chained")
        rows = f"; rows: {self.table}" if self.table else ""
        return where + "; " + ", ".join(f"{k}: {v}" for k, v in sorted(self.states.items())) + rows


@dataclass(frozen=True)
class Run:
    """`count` entries of one state at ``pos + i * stride``: key at +4 (`klen` bytes), value at +8+klen (`vlen`)."""

    chain: int
    sid: int
    pos: int
    count: int
    stride: int
    klen: int
    vlen: int
    #: `locate` proved every key's byte after the prefix to be a one-byte StringValue header saying the key's width
    #: (``klen - prefix - 1`` bytes: header and ASCII-wide chars, then VoidNamespace's byte); see `locate`'s `string_keys`
    head: bool = False

    def field(self, buf: np.ndarray, offset: int, dtype: str) -> np.ndarray:
        """One fixed-width field of every entry (at `offset` from the entry start) as a strided view, no copy."""
        return field_view(buf, self.pos + offset, self.count, self.stride, dtype)

    def entries(self, idx: np.ndarray | None = None) -> "Entries":
        """The positions of the run's entries (those at `idx` only, if given)."""
        i = np.arange(self.count, dtype=np.int64) if idx is None else idx.astype(np.int64)
        pos = self.pos + i * self.stride
        n = len(i)
        return Entries(np.full(n, self.chain, np.int64), np.full(n, self.sid, np.int64), pos + 4,
                       np.full(n, self.klen, np.int64), pos + 8 + self.klen, np.full(n, self.vlen, np.int64))


def field_view(buf: np.ndarray, pos: int, count: int, stride: int, dtype: str) -> np.ndarray:
    """`count` values of `dtype` at ``pos + i * stride`` in `buf`, as a zero-copy (unaligned) strided array."""
    return np.ndarray((count,), np.dtype(dtype), buffer=buf.data, offset=pos, strides=(stride,))


@dataclass
class Entries:
    """Per-entry positions: key at `kp` (`klen` bytes), value at `vp` (`vlen` bytes)."""

    chain: np.ndarray
    sid: np.ndarray
    kp: np.ndarray
    klen: np.ndarray
    vp: np.ndarray
    vlen: np.ndarray

    def __len__(self) -> int:
        return len(self.kp)

    def take(self, idx: np.ndarray | slice) -> "Entries":
        return Entries(*(a[idx] for a in (self.chain, self.sid, self.kp, self.klen, self.vp, self.vlen)))

    @staticmethod
    def concat(parts: list["Entries"]) -> "Entries":
        if not parts:
            e = np.zeros(0, np.int64)
            return Entries(e, e, e, e, e, e)
        if len(parts) == 1:
            return parts[0]
        return Entries(*(np.concatenate([getattr(p, f) for p in parts])
                         for f in ("chain", "sid", "kp", "klen", "vp", "vlen")))

    @staticmethod
    def of_runs(runs: list[Run]) -> "Entries":
        """The entries of `runs`, in order (a few passes over all of them, however many runs: one may be one entry)."""
        if len(runs) <= 2:
            return Entries.concat([r.entries() for r in runs])
        chain, sid, pos, count, stride, klen, vlen = (np.array(col, np.int64) for col in zip(
            *((r.chain, r.sid, r.pos, r.count, r.stride, r.klen, r.vlen) for r in runs)))
        first = np.zeros(len(runs), np.int64)  # each run's first entry among all
        np.cumsum(count[:-1], out=first[1:])
        of = np.repeat(np.arange(len(runs)), count)
        at = np.arange(len(of), dtype=np.int64)
        at -= first[of]  # the entry's index in its run
        at *= stride[of]
        at += pos[of]  # the entry's start
        k = klen[of]
        return Entries(chain[of], sid[of], at + 4, k, at + 8 + k, vlen[of])


@dataclass
class Located:
    """Where a key group's entries lie: strided runs, walked entries and scanned pieces."""
    runs: list[Run]  # strided runs
    chained: Entries  # walked entries, any state
    pieces: list[tuple[int, int, Entries]] | None = None  # scanned: (chain, state id, that state run's entries)
    #: (chain, state id) -> the state id of an earlier run of that chain proven to hold the same keys in
    #: the same order, with values of the same width (`_copy_run`)
    same_keys: dict[tuple[int, int], int] = field(default_factory=dict)

    def same_keys_as(self, chain: int, sid: int, other: int) -> bool:
        """Whether state runs `sid` and `other` of `chain` were proven to list the same keys in the same order."""
        a, b = self.same_keys.get((chain, sid)), self.same_keys.get((chain, other))
        return (a is not None or b is not None) and (sid if a is None else a) == (other if b is None else b)


def corrupt(where: str, why: str) -> CorruptSavepointError:
    """The error for a key group whose lengths or offsets point outside its bytes."""
    return CorruptSavepointError(
        f"{where}: {why}. The key group is damaged (a bad length or offset); the savepoint cannot be read. "
        "Take a new savepoint or restore this one from a copy."
    )


def _be32(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    b = gather_fixed(buf, at, 4).astype(np.int64)
    return b[:, 0] << 24 | b[:, 1] << 16 | b[:, 2] << 8 | b[:, 3]


def locate(buf: np.ndarray, starts: np.ndarray, limits: np.ndarray, where: str, stats: DecodeStats, *,
           chain_kg: np.ndarray | None = None, prefix_bytes: int = 1, value_width: int | None = None,
           until: int | None = None, string_keys: bool = False) -> Located:
    """Every entry of the key groups starting at `starts` (each ending before `limits`).

    With `chain_kg` (each chain's key group), variable-sized entries are first found by `_scan`;
    chains it cannot prove are walked by `_chained`. `value_width`: every value is known to be that
    many bytes (fixed-width ValueStates only), which lets the scan look for the value lengths.
    `until` (one-key reads): entries that start after this offset may be left out of a scanned chain.
    `string_keys`: keys are StringValues in VoidNamespace; strided runs then check each key's length
    header in the same comparison as its key-group prefix (`Run.head`), where the prefix is one byte.
    """
    runs: list[Run] = []
    pending: list[tuple[int, int, int]] = []  # (chain, position, state id) left for the chained walk
    same_keys: dict[tuple[int, int], int] = {}
    scratch: np.ndarray | None = None  # `_copies_run`'s
    heads = string_keys and prefix_bytes == 1
    n = len(buf)
    for c, (p, lim) in enumerate(zip(starts.tolist(), limits.tolist())):
        if p + 2 > lim or lim > n:
            raise corrupt(where, f"key group at offset {p} lies outside its stream")
        sid0 = sid = int(buf[p]) << 8 | int(buf[p + 1])
        p += 2
        first_run = len(runs)
        located = irregular = copied = 0
        # The states of a key group mostly list the same keys: a later state's runs are tried first as copies of
        # the first state's runs (`_copies_run`: one contiguous comparison instead of a probe, and the proof that
        # its keys need no comparison when the columns are cut)
        base: list[tuple[Run, bool]] = []  # the first state's runs, and whether each ended that state
        copy_at = 0  # the run of `base` the current state's next run may copy; -1 once one did not
        copies: list[tuple[int, int]] = []  # this chain's entries of `same_keys`
        while True:
            got = None
            if sid != sid0 and 0 <= copy_at < len(base):
                r, r_ends = base[copy_at]
                scratch = _copy_scratch() if scratch is None else scratch
                if _copies_run(buf, r, p, lim, scratch):
                    got = (r.count, r.stride, r.klen, r.vlen, r_ends, r.head)
                    copy_at += 1
                    copied += r.count
                    stats.strided_copied += r.count
                else:
                    copy_at = -1
            if got is None and chain_kg is not None and heads:
                # (an entry whose header does not say its width, e.g. of non-ASCII chars, fails this probe: its run is
                # then probed without the header, and the key column checks the headers of that run itself)
                got = _strided(buf, p, lim, (int(chain_kg[c]), prefix_bytes), True)
            if got is None:
                got = _strided(buf, p, lim, None if chain_kg is None else (int(chain_kg[c]), prefix_bytes))
            if got is not None and got[0] < _MIN_RUN:
                irregular += 1
                if irregular > _IRREGULAR_FREE + located // _IRREGULAR_EVERY:
                    got = None
            if got is None:
                # the whole chain goes to the scan (or walk), so that every state of a key group is located
                # one way and all states list their keys in the same order
                stats.strided_entries -= sum(r.count for r in runs[first_run:])
                stats.strided_copied -= copied
                del runs[first_run:]
                for key in copies:
                    del same_keys[key]
                pending.append((c, int(starts[c]) + 2, sid0))
                break
            count, stride, k, v, ends_run, head = got
            runs.append(Run(c, sid, p, count, stride, k, v, head))
            if sid == sid0:
                base.append((runs[-1], ends_run))
            stats.strided_entries += count
            located += count
            p += count * stride
            if ends_run:
                if p + 2 > lim:
                    raise corrupt(where, f"a state run ends at offset {p} without a following state id")
                if sid != sid0 and copy_at == len(base):  # every run of this state copied the first state's
                    same_keys[(c, sid)] = sid0
                    copies.append((c, sid))
                copy_at = 0
                sid = int(buf[p]) << 8 | int(buf[p + 1])
                p += 2
                if sid == END_OF_KEY_GROUP:
                    break
    pieces: list[tuple[int, int, Entries]] = []
    if pending and chain_kg is not None:
        pieces, pending = _scan(buf, pending, limits, chain_kg, prefix_bytes, stats, value_width, until, same_keys)
    walked = _chained(buf, pending, limits, where, stats) if pending else Entries.concat([])
    return Located(runs, walked, pieces, same_keys)


def _scan(buf: np.ndarray, pending: list[tuple[int, int, int]], limits: np.ndarray, chain_kg: np.ndarray, P: int,
          stats: DecodeStats, value_width: int | None = None, until: int | None = None,
          same_keys: dict[tuple[int, int], int] | None = None,
          ) -> tuple[list[tuple[int, int, Entries]], list[tuple[int, int, int]]]:
    """Variable-sized entries found without walking: every plausible entry header is a candidate, then proven.

    A candidate at c has a small key length (``i32 < 256``), its key group in the prefix, and a value
    length that fits. The true entries form a chain from the region's start; if each candidate's end
    (plus 2 after a run's last entry) is exactly the next candidate, the candidates are that chain -
    a false candidate would sit between two true entries and break the equality. Regions that fail
    the proof are returned for the chained walk. State runs found to repeat an earlier run's keys are
    recorded in `same_keys` as (chain, state id) -> that run's state id.
    """
    parts: list[tuple[int, int, Entries]] = []
    left: list[tuple[int, int, int]] = []
    for c_, p, sid in pending:
        lim = int(limits[c_])
        if value_width is not None:
            scanned = _scan_value_lengths(buf, p, lim, int(chain_kg[c_]), P, c_, sid, value_width, until)
            if scanned is not None:
                runs, copies = scanned
                for run_sid, e in runs:  # one piece per state run: no regrouping later
                    parts.append((c_, run_sid, e))
                    stats.value_length_scanned += len(e)
                    stats.scanned_entries += len(e)
                    if run_sid in copies:
                        stats.copied_entries += len(e)
                        if same_keys is not None:
                            same_keys[(c_, run_sid)] = copies[run_sid]
                continue
        got = _scan_region(buf, p, lim, int(chain_kg[c_]), P, c_, sid)
        if got is None:
            left.append((c_, p, sid))
            continue
        e, bounds = got
        stats.scanned_entries += len(e)
        for a, b in zip(bounds[:-1], bounds[1:]):  # one piece per state run: no regrouping later
            parts.append((c_, int(e.sid[a]), e.take(slice(a, b))))
    return parts, left


def _scan_region(buf: np.ndarray, p: int, lim: int, kg: int, P: int, chain: int,
                 sid: int) -> tuple[Entries, list[int]] | None:
    m = lim - p
    if m < 10:
        return None
    seg = buf[p:lim]
    # Candidates: the key group's byte (its run-end flag aside) 4 bytes after three zero bytes and a
    # nonzero key length byte. Filtering on the rare byte first keeps the later tests small.
    if P == 1:
        c = np.flatnonzero((seg[4:] & 0x7F) == kg)
    else:
        c = np.flatnonzero(seg[5:] == (kg & 0xFF))
        c = c[(seg[c + 4] & 0x7F) == kg >> 8]
    c = c[(seg[c + 3] != 0) & (seg[c] == 0) & (seg[c + 1] == 0) & (seg[c + 2] == 0)]
    if not len(c) or c[0] != 0:
        return None
    k = seg[c + 3].astype(np.int64)
    q = c + 4 + k  # the value length field
    ok = q + 4 <= m
    if not ok.all():
        c, k, q = c[ok], k[ok], q[ok]
    u = np.ndarray((m - 3,), np.dtype(">u4"), buffer=buf.data, offset=p, strides=(1,))  # an i32 at every byte
    v = u[q].astype(np.int64)
    end = q + 4 + v
    ok = end <= m  # (a negative i32 read unsigned never fits)
    if not ok.all():
        c, k, q, v, end = c[ok], k[ok], q[ok], v[ok], end[ok]
    if not len(c) or c[0] != 0:
        return None
    flag = seg[c + 4] >= 0x80
    nxt = end + 2 * flag
    keep = _follow(c, nxt)
    if keep is not None:
        c, k, q, v, nxt, flag = c[keep], k[keep], q[keep], v[keep], nxt[keep], flag[keep]
    if nxt[-1] > m or not flag[-1]:
        return None
    fpos = nxt[flag] - 2
    sids = seg[fpos].astype(np.int64) << 8 | seg[fpos + 1]
    if sids[-1] != END_OF_KEY_GROUP or (sids[:-1] == END_OF_KEY_GROUP).any():
        return None
    n = len(c)
    ends = np.flatnonzero(flag) + 1
    bounds = [0] + ends.tolist()
    sid_of = np.empty(n, np.int64)
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        sid_of[lo:hi] = sid if i == 0 else sids[i - 1]
    return Entries(np.full(n, chain, np.int64), sid_of, p + c + 4, k, p + q + 4, v), bounds


def _scan_value_lengths(buf: np.ndarray, p: int, lim: int, kg: int, P: int, chain: int, sid: int, W: int,
                        until: int | None = None) -> tuple[list[tuple[int, Entries]], dict[int, int]] | None:
    """`_scan_region` for values all `W` bytes long: candidates are the value lengths, the bytes ``00 00 00 W``.

    Those four bytes are rare inside keys and values, unlike a key group's byte (in key group 0x30
    every digit of a String key is one), so there are few false candidates, and the value length is
    known. The successor of the value length at q is the one of the entry starting at its end
    (``q + 4 + W``, or 2 bytes later after a state run's last entry, where the state id sits). The
    chain from the first entry is then proven as in `_scan_region`: every kept entry is what a walk
    from the region's start reads (key length, key-group prefix, value length W, run-end flags,
    state ids), or the region goes back to `_scan_region`.

    The proof goes `_CHUNK` bytes at a time, each step starting at the entry the previous one proved
    to come next: its scratch arrays stay in cache and are reused from malloc's arena instead of
    being fresh (page-faulted) memory each time. A step ends at a state run's end, so each step
    belongs to one run. With `until` (an offset in `buf`, for one-key reads) it stops at the first
    step past it: the entries returned are then the proven chain up to there, the last run cut short.

    A state run after the first is tried first as a copy of the first's layout (`_copy_run`: the states
    of a key group mostly list the same keys): one byte comparison instead of a proof.

    Returns the state runs in order, each as (state id, its entries), and the state ids of the runs
    found as copies mapped to the first run's state id.
    """
    m = lim - p
    if m < 8 + W + P or W > 255:
        return None
    seg = buf[p:lim]
    # A u32 at every byte, read little-endian (native, so gathers are plain loads): the big-endian
    # i32 ``00 00 00 L`` (0 < L < 256) reads as ``L << 24``; byte-swapped after a gather, as L.
    every = np.ndarray((m - 3,), np.dtype("<u4"), buffer=buf.data, offset=p, strides=(1,))

    def lengths(at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # the i32 at each position, and whether it is not 1..255
        x = every[at]
        x.byteswap(inplace=True)
        return x, (x - 1) >= 255  # (unsigned: 0 wraps around)

    runs: list[tuple[int, Entries]] = []
    run_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # the current run's proven steps: (kp, klen, vp)

    def end_run(run_sid: int) -> None:  # the current run's steps as one piece (constant columns: broadcast views)
        kp, klen, vp = (np.concatenate(c) if len(run_parts) > 1 else c[0] for c in zip(*run_parts))
        n = len(kp)
        runs.append((run_sid, Entries(np.broadcast_to(np.int64(chain), (n,)), np.broadcast_to(np.int64(run_sid), (n,)),
                                      kp, klen, vp, np.broadcast_to(np.int64(W), (n,)))))
        run_parts.clear()

    last = m - 4
    kg_high = kg >> 8 if P == 2 else kg  # the first key byte, run-end flag aside
    pos, cur_sid = 0, sid  # the next entry to prove starts at `pos`, in state run `cur_sid`
    run_pos = 0  # where the current state run's first entry starts (in `seg`)
    first_run: tuple[int, int, int] | None = None  # the key group's first state run: (sid, start, end)
    copies: dict[int, int] = {}
    copy_tried = False
    while True:
        if first_run is not None and not copy_tried:
            copy_tried = True
            copied = _copy_run(buf, p, m, first_run, runs[0][1], run_pos, W)
            if copied is not None:
                run_parts.append(copied)
                end_run(cur_sid)
                copies[cur_sid] = first_run[0]
                at = run_pos + first_run[2] - first_run[1]
                cur_sid = int(seg[at]) << 8 | int(seg[at + 1])
                if cur_sid == END_OF_KEY_GROUP:
                    break
                pos = run_pos = at + 2
                copy_tried = False
                if pos >= m or (until is not None and p + pos > until):
                    if until is None:  # the region ended without the key group's end marker
                        return None
                    break
                continue
        if pos > last:
            return None
        x0 = int(every[pos])
        k0 = x0 >> 24 if not x0 & 0xFFFFFF else 0
        q0 = pos + 4 + k0
        hi = min(max(pos + _CHUNK, q0 + 1), m - 3)  # this step's candidates lie in [q0, hi)
        if not k0 or q0 >= hi:
            return None
        q = np.flatnonzero(seg[q0 + 3 : hi + 3] == W)  # one pass over the bytes; then three zero bytes before each W
        q += q0
        q = q[(every[q] & 0xFFFFFF) == 0]
        if len(q) and q[-1] + 4 + W > m:
            q = q[q + 4 + W <= m]
        if not len(q) or q[0] != q0:  # the first entry's value length is candidate 0
            return None
        # The entry after each candidate starts at its end `e`, or 2 bytes on (a state id) where no key
        # length starts; its key length gives the next candidate. The kept chain is checked below
        # against the run-end flags, so a wrong guess here is caught.
        e = q + (4 + W)
        s = np.minimum(e, last) if e[-1] > last else e  # (`e` ascends)
        kl, bad = lengths(s)
        moved = np.flatnonzero(bad)
        if len(moved):
            if s is e:
                s = e.copy()
            s[moved] = np.minimum(s[moved] + 2, last)
            kl[moved], bad[moved] = lengths(s[moved])
        nxt = s + 4
        nxt += kl
        # A candidate with no plausible successor can only be the key group's last entry: dropping the
        # others first usually leaves no false candidate for `_follow` to prune (a true one dropped
        # here would only break the chain, and the checks below then refuse it).
        if bad[-1]:
            nxt[-1] = -1
        live = ~bad
        live[-1] = True
        if not live.all():
            q, e, s, kl, nxt = q[live], e[live], s[live], kl[live], nxt[live]
        keep = _follow(q, nxt)
        if keep is not None:
            q, e, s, kl = q[keep], e[keep], s[keep], kl[keep]
        # On the chain from this step's first entry each entry starts where its predecessor said
        # (`_follow`); the path ends at the last entry whose successor's value length lies past `hi`.
        n = len(q)
        kp = np.empty(n, np.int64)  # where each key starts, in `buf`
        kp[0] = p + pos + 4
        np.add(s[:-1], p + 4, out=kp[1:])
        klen = np.empty(n, np.int64)
        klen[0] = k0
        klen[1:] = kl[:-1]
        if int(klen.min()) <= P:
            return None
        first = buf[kp]
        first ^= kg_high  # 0, or 0x80 on a state run's last entry
        flag = first >= 0x80
        first &= 0x7F
        if first.any() or (P == 2 and not (buf[kp + 1] == (kg & 0xFF)).all()) or int(e[-1]) + 2 * bool(flag[-1]) > m:
            return None
        # Between entries nothing, and after each state run's last entry exactly a state id (2 bytes).
        ends = np.flatnonzero(flag)
        gap = kp[1:] - e[:-1]
        gap -= p + 4
        apart = np.flatnonzero(gap)
        if not np.array_equal(apart, ends[ends < n - 1]) or not (gap[apart] == 2).all():
            return None
        run_sid, done = cur_sid, False
        if len(ends):  # the step ends at its first run end: the next run is first tried as a copy
            i = int(ends[0])
            at = int(e[i])
            cur_sid = int(seg[at]) << 8 | int(seg[at + 1])
            if cur_sid == END_OF_KEY_GROUP:
                if i != n - 1:  # entries after the key group's end
                    return None
                done = True
            else:
                run_pos, copy_tried = at + 2, False
                n = i + 1
                kp, klen, q, e, flag = kp[:n], klen[:n], q[:n], e[:n], flag[:n]
            if first_run is None:
                first_run = (run_sid, 0, at)
        run_parts.append((kp, klen, q + (p + 4)))  # key and value positions in `buf`
        if len(ends):
            end_run(run_sid)
        pos = int(e[-1]) + 2 * bool(flag[-1])
        if done:
            break
        if pos >= m or (until is not None and p + pos > until):
            if until is None:  # the region ended without the key group's end marker
                return None
            if run_parts:
                end_run(cur_sid)
            break
    return runs, copies


def _copy_run(buf: np.ndarray, p: int, m: int, first_run: tuple[int, int, int], first: Entries, run_pos: int,
              W: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The entries (kp, klen, vp) of the state run at `run_pos` of `buf[p:p+m]` when its bytes equal the key group's
    first run's (`first`) everywhere but in the values, else None.

    Equal bytes outside the values mean equal key lengths, keys (run-end flag included) and value
    lengths, so a walk of this run meets its entries where the first run's lie, shifted: its
    positions are the first run's, and it holds the same keys in the same order. The state id after
    it is read by the caller (and the walk's next step is checked like any other).
    """
    _, start, end = first_run
    length = end - start
    if run_pos + length + 2 > m or not equal_except_values(buf, p + start, p + run_pos, length, first.vp - (p + start), W):
        return None
    shift = run_pos - start
    return first.kp + shift, first.klen, first.vp + shift


def _copy_scratch() -> np.ndarray:
    """This thread's scratch for `_copies_run` (`_COPY_BLOCK_BYTES`), kept from one read to the next."""
    got = getattr(_scratch, "buf", None)
    if got is None or len(got) != _COPY_BLOCK_BYTES:
        got = _scratch.buf = np.empty(_COPY_BLOCK_BYTES, np.uint8)
    return got


def _copies_run(buf: np.ndarray, r: Run, p: int, lim: int, scratch: np.ndarray) -> bool:
    """Whether the bytes from `p` (before `lim`) repeat those of run `r` everywhere but in its entries' values.

    Equal bytes outside the values mean `r.count` entries of `r`'s key and value sizes, with its keys
    (key-group prefixes and run-end flags included) in its order. Compared a block at a time: the
    bytes XORed into `scratch`, the values' bytes zeroed there (a strided view), then one test.
    """
    if p + r.count * r.stride > lim:
        return False
    per = max(1, len(scratch) // r.stride)
    for lo in range(0, r.count, per):
        m = min(per, r.count - lo)
        size, at = m * r.stride, lo * r.stride
        diff = scratch[:size] if size <= len(scratch) else np.empty(size, np.uint8)
        np.bitwise_xor(buf[r.pos + at : r.pos + at + size], buf[p + at : p + at + size], out=diff)
        if r.vlen in (1, 2, 4, 8):
            field_view(diff, 8 + r.klen, m, r.stride, f"u{r.vlen}")[:] = 0
        elif r.vlen:
            np.ndarray((m, r.vlen), np.uint8, buffer=diff.data, offset=8 + r.klen, strides=(r.stride, 1))[:] = 0
        if diff.any():
            return False
    return True


def equal_except_values(buf: np.ndarray, a: int, b: int, length: int, values: np.ndarray, W: int) -> bool:
    """Whether the `length` bytes at `a` and at `b` of `buf` are equal except in the `W`-byte values at offsets `values`
    (from `a`/`b`, ascending, inside the range): one pass, the values' differences masked out."""
    diff = np.bitwise_xor(buf[a : a + length], buf[b : b + length])
    if W in (1, 2, 4, 8):
        np.ndarray((length - W + 1,), np.dtype(f"u{W}"), buffer=diff.data, strides=(1,))[values] = 0
    else:
        for k in range(W):
            diff[values + k] = 0
    return not diff.any()


def _strided(buf: np.ndarray, p: int, lim: int, prefix: tuple[int, int] | None = None,
             string_head: bool = False) -> tuple[int, int, int, int, bool, bool] | None:
    """A run of equal-sized entries from `p`: (count, stride, klen, vlen, run ends, header checked), or None where no
    entry starts.

    With `prefix` (the chain's key group, and the prefix's 1 or 2 bytes) every entry of the run carries
    that key group in its key's prefix (the run ends before one that does not; None if the first does not).
    `string_head` (a one-byte prefix): so does the byte after it, a StringValue header saying the key's width (see
    `Run.head`), read with the prefix as one word; keys wider than 127 bytes have a two-byte header, so not.
    """
    if p + 8 > lim:
        return None
    k = int.from_bytes(buf[p : p + 4].tobytes(), "big", signed=True)
    if k <= 0 or p + 8 + k > lim:
        return None
    v = int.from_bytes(buf[p + 4 + k : p + 8 + k].tobytes(), "big", signed=True)
    if v < 0 or p + 8 + k + v > lim:
        return None
    stride = 8 + k + v
    room = (lim - p) // stride
    # the length fields compared as little-endian words against their byte-swapped values: no conversion pass
    k_le, v_le = (int.from_bytes(x.to_bytes(4, "big"), "little") for x in (k, v))
    # The key's first byte: the run's last entry has 0x80 set. With the chain's key group it is the prefix,
    # word compared whole (the flag set in the run's last entry only).
    # With `string_head` the prefix and the header are one little-endian word: the header in its high byte.
    checked = string_head and prefix is not None and prefix[1] == 1 and 1 <= k - 2 <= 127
    if prefix is None:
        word, want, last = "u1", None, None
    else:
        kg, P = prefix
        word = "u1" if P == 1 and not checked else "<u2"
        want = kg if P == 1 else kg >> 8 | (kg & 0xFF) << 8  # the big-endian prefix read little-endian
        last = want | 0x80
        if checked:
            want, last = want | (k - 2) << 8, last | (k - 2) << 8
    done, block = 0, _PROBE
    most = max(_PROBE, _PROBE_BYTES // stride)
    while done < room:
        m = min(block, room - done, most)
        at = p + done * stride
        bad = field_view(buf, at, m, stride, "<u4") != k_le
        bad |= field_view(buf, at + 4 + k, m, stride, "<u4") != v_le
        first = field_view(buf, at + 4, m, stride, word)
        stop = first >= 0x80 if want is None else first != want  # the run's last entry, or another key group
        stop |= bad
        i = int(stop.argmax())
        if stop[i]:  # the first entry of another size, the run's last entry, or one of another key group
            if bad[i]:
                return done + i, stride, k, v, False, checked
            if want is None or int(first[i]) == last:
                return done + i + 1, stride, k, v, True, checked
            return (done + i, stride, k, v, False, checked) if done + i else None  # (that entry: the scan or walk)
        done += m
        block *= 4
    # No full stride is left: a shorter entry may follow (the next run), else the chain's end is damaged (the
    # next probe finds no entry and the scan or walk reports it)
    return (done, stride, k, v, False, checked) if done else None


def _follow(c: np.ndarray, nxt: np.ndarray) -> np.ndarray | None:
    """Indexes of the candidates on the chain from candidate 0 (each candidate's successor starts at `nxt`); None: all.

    Without false candidates every candidate's successor is the next one. Otherwise a candidate is
    kept while a kept candidate (or the start) points at it: a false one lies inside a true entry, so
    no true entry points at it. A few such rounds clear the usual stray candidates; a false chain that
    runs beside the true one (key group 0's prefix byte is the 0 of every value length) is left to
    pointer doubling: succ^(2^r) tables, then the path from candidate 0 doubled each round.
    """
    n = len(c)
    off = np.flatnonzero(nxt[:-1] != c[1:])
    if not len(off):
        return None
    off = np.append(off, n - 1)
    at = np.searchsorted(c, nxt[off])
    succ_off = np.where((at < n) & (c[np.minimum(at, n - 1)] == nxt[off]), at, n)  # n: no successor among them
    if len(off) <= _FEW_EXCEPTIONS:
        walked = _walk_exceptions(n, off.tolist(), succ_off.tolist())
        if walked is not None:
            return walked
    j = np.arange(1, n + 1)  # mostly a candidate's successor is the next candidate: search only the others
    j[off] = succ_off
    keep = np.ones(n, bool)
    for _ in range(_PRUNE_ROUNDS):
        hit = np.zeros(n + 1, bool)
        hit[j[keep]] = True
        hit[0] = True
        if np.array_equal(hit[:n], keep):
            return np.flatnonzero(keep)
        keep = hit[:n]
    succ = [np.append(j, n)]
    while len(succ) < 64 and not (succ[-1][:n] == n).all():
        succ.append(succ[-1][succ[-1]])
    path = np.array([0])
    for table in succ:
        if path[-1] == n:
            break
        path = np.concatenate([path, table[path]])
    path = path[path < n]
    return path[np.concatenate([[True], path[1:] > path[:-1]])] if len(path) > 1 else path


def _walk_exceptions(n: int, off: list[int], succ: list[int]) -> np.ndarray | None:
    """`_follow`'s path when few candidates (`off`, ascending) have a successor other than the next one.

    From candidate 0 the path steps to the next candidate except at an exception `i`, where it jumps
    to `succ[i]`, leaving out the candidates jumped over (and all after it, when `succ[i]` is `n`).
    Exceptions that the path jumps over are not on it. None when a jump goes backwards (then the
    caller's general method answers).
    """
    keep = np.ones(n, bool)
    reached = 0  # the path covers every candidate from here up to the next exception it meets
    for i, t in zip(off, succ):
        if i < reached:
            continue  # jumped over: not on the path
        if t <= i:
            return None
        keep[i + 1 : t] = False
        if t >= n:
            break
        reached = t
    return np.flatnonzero(keep)


def _chained(buf: np.ndarray, pending: list[tuple[int, int, int]], limits: np.ndarray, where: str,
             stats: DecodeStats) -> Entries:
    """Advance every pending chain by one entry per step (variable-sized entries)."""
    C = np.array([c for c, _, _ in pending], np.int64)
    P = np.array([p for _, p, _ in pending], np.int64)
    S = np.array([s for _, _, s in pending], np.int64)
    L = limits[C].astype(np.int64)
    out: list[tuple[np.ndarray, ...]] = []
    while len(P):
        if (P + 8 > L).any():
            raise corrupt(where, "an entry starts too close to the end of its key group")
        K = _be32(buf, P)
        kp = P + 4
        vq = kp + K
        if (K <= 0).any() or (K >= 1 << 31).any() or (vq + 4 > L).any():
            raise corrupt(where, "an entry's key length runs past its key group")
        V = _be32(buf, vq)
        vp = vq + 4
        P = vp + V
        if (V >= 1 << 31).any() or (P > L).any():
            raise corrupt(where, "an entry's value length runs past its key group")
        out.append((C, S, kp, K, vp, V))
        f = np.flatnonzero(buf[kp] & 0x80)
        if len(f):
            at = P[f]
            if (at + 2 > L[f]).any():
                raise corrupt(where, "a state run ends without a following state id")
            nxt = buf[at].astype(np.int64) << 8 | buf[at + 1]
            P[f] = at + 2
            S = S.copy()
            S[f] = nxt
            done = f[nxt == END_OF_KEY_GROUP]
            if len(done):
                keep = np.ones(len(P), bool)
                keep[done] = False
                C, P, S, L = C[keep], P[keep], S[keep], L[keep]
    cols = [np.concatenate([o[i] for o in out]) for i in range(6)]
    stats.chained_entries += len(cols[0])
    return Entries(*cols)
