"""Multi-rank check of the context-parallel math over torch.distributed (docs/slot_mapping.md and
docs/context_parallel.md).

Every rank builds the same batches, computes its own share with specops (its CP local metadata,
its DCP-sharded slot mapping, its slice of the DSpark index table), and all ranks gather the
shares. Each rank then checks, on the gathered data:

- the local query lengths of all ranks sum to the global ones, and each rank's local tokens are
  exactly its slice [local_start, local_end) of the real tokens;
- a rank's causal local seq_len of a request is seq_len minus the request's tokens that the
  gathered data places on later ranks, and its host maxima match its tensors;
- every token's KV is stored on exactly one rank, and no two tokens share a slot on a rank;
- the DSpark slices, concatenated in rank order, are the full padded table.

The backend is a parameter: gloo on CPU tensors (the test suite starts 2 and 4 processes on
127.0.0.1), NCCL on CUDA devices, HCCL on Ascend NPUs. See docs/context_parallel.md:

    python -m specops.distributed_check --world-size 4                      # gloo, local processes
    torchrun --nproc-per-node 8 -m specops.distributed_check --backend nccl  # one process per GPU
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import logging
import multiprocessing
import os
import queue
import socket
import sys
import time
import traceback

import torch
import torch.distributed as dist

import specops
from specops._constants import PAD_SLOT_ID

DEFAULT_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True)
class CheckCase:
    """One batch: request r has query_lens[r] new tokens after context_lens[r] old ones."""

    name: str
    query_lens: tuple[int, ...]
    context_lens: tuple[int, ...]
    padding: int = 0  # num_input_tokens - T: padded tokens at the end of the stream
    zero_seq_lens: tuple[int, ...] = ()  # requests whose seq_len is forced to 0 (dummy rows)
    block_size: int = 16
    cp_interleave: int = 1
    window: int = 8
    num_speculative_tokens: int = 3
    seed: int = 0


def default_cases() -> list[CheckCase]:
    """Requests that straddle rank boundaries, zero-length requests, seq_lens of 0, padding."""
    cases = [
        CheckCase("decode", (4,) * 9, (30, 0, 61, 17, 100, 5, 8, 64, 3)),
        CheckCase("straddling prefill", (37, 1, 0, 23), (0, 70, 12, 9), padding=5, zero_seq_lens=(1,),
                  cp_interleave=4),
        CheckCase("zero-length and padding", (0, 3, 0, 0, 11, 2), (5, 0, 9, 0, 40, 31), padding=13,
                  block_size=8, cp_interleave=2, window=20, num_speculative_tokens=4),
        CheckCase("one long request", (61,), (200,), padding=2, block_size=4, window=130),
        CheckCase("empty batch", (), (), padding=6),
    ]
    generator = torch.Generator().manual_seed(1234)
    for seed in range(3):
        num_reqs = int(torch.randint(1, 12, (1,), generator=generator))
        query_lens = torch.randint(0, 20, (num_reqs,), generator=generator).tolist()
        context_lens = torch.randint(0, 150, (num_reqs,), generator=generator).tolist()
        zero = tuple(r for r in range(num_reqs) if float(torch.rand(1, generator=generator)) < 0.15)
        cases.append(CheckCase(f"random {seed}", tuple(query_lens), tuple(context_lens),
                               padding=int(torch.randint(0, 9, (1,), generator=generator)), zero_seq_lens=zero,
                               cp_interleave=(1, 2, 4)[seed], seed=seed))
    return cases


@dataclasses.dataclass
class CaseBatch:
    """The tensors of a case, identical on every rank (host copies; the ops get device copies)."""

    query_start_loc: torch.Tensor  # int32 [R + 1]
    positions: torch.Tensor  # int64 [T]
    seq_lens: torch.Tensor  # int32 [R]
    kv_block_table: torch.Tensor  # int32 [R, cols]: DCP-sharded KV, distinct block ids
    dspark_block_table: torch.Tensor  # int32 [R, cols]: the DSpark group's own table
    num_input_tokens: int

    @property
    def num_tokens(self) -> int:
        return self.positions.numel()


def make_case_batch(case: CheckCase, world_size: int) -> CaseBatch:
    generator = torch.Generator().manual_seed(case.seed)
    query_lens = torch.tensor(case.query_lens, dtype=torch.int32)
    num_reqs = query_lens.numel()
    query_start_loc = torch.zeros(num_reqs + 1, dtype=torch.int32)
    query_start_loc[1:] = torch.cumsum(query_lens, 0)
    positions = torch.cat(
        [torch.arange(c, c + q, dtype=torch.int64) for c, q in zip(case.context_lens, case.query_lens)]
        or [torch.zeros(0, dtype=torch.int64)]
    )
    seq_lens = torch.tensor(case.context_lens, dtype=torch.int32) + query_lens
    max_seq = int(seq_lens.max()) if num_reqs else 0
    seq_lens[list(case.zero_seq_lens)] = 0

    def distinct_table(tokens_per_column: int) -> torch.Tensor:
        cols = max(1, -(-max_seq // tokens_per_column))
        ids = torch.randperm(max(num_reqs, 1) * cols, generator=generator)[: num_reqs * cols] + 1
        return ids.to(torch.int32).reshape(num_reqs, cols)

    return CaseBatch(query_start_loc, positions, seq_lens, distinct_table(case.block_size * world_size),
                     distinct_table(case.block_size), int(query_lens.sum()) + case.padding)


@dataclasses.dataclass
class RankShare:
    """What one rank computes for one case (on its device)."""

    local_query_start_loc: torch.Tensor  # int32 [R + 1]
    local_seq_lens: torch.Tensor  # int32 [R]
    local_range: torch.Tensor  # int64 [4]: local_start, local_end, max_local_query_len, max_local_seq_len
    slot_mapping: torch.Tensor  # int64 [T]
    dspark_indices: torch.Tensor  # int32 [tokens_per_rank, 1, width]
    dspark_lens: torch.Tensor  # int32 [tokens_per_rank]


def compute_share(case: CheckCase, batch: CaseBatch, world_size: int, rank: int, device: torch.device) -> RankShare:
    on_device = {name: getattr(batch, name).to(device) for name in
                 ("query_start_loc", "positions", "seq_lens", "kv_block_table", "dspark_block_table")}
    host_copies = {}
    if device.type != "cpu":  # the host ints come from host copies: no device-to-host copy
        host_copies = dict(query_start_loc_cpu=batch.query_start_loc, seq_lens_cpu=batch.seq_lens)
    meta = specops.cp_local_metadata(on_device["query_start_loc"], on_device["seq_lens"], batch.num_input_tokens,
                                     world_size, rank, causal=True, **host_copies)
    slot_mapping = specops.compute_slot_mapping(
        on_device["query_start_loc"], on_device["positions"], on_device["kv_block_table"], case.block_size,
        cp_world_size=world_size, cp_rank=rank, cp_interleave=case.cp_interleave)
    indices, lens = specops.dspark_swa_indices(
        on_device["dspark_block_table"], on_device["query_start_loc"], on_device["seq_lens"], window=case.window,
        num_speculative_tokens=case.num_speculative_tokens, block_size=case.block_size,
        num_tokens=batch.num_input_tokens, cp_size=world_size, cp_rank=rank)
    local_range = torch.tensor([meta.local_start, meta.local_end, meta.max_local_query_len, meta.max_local_seq_len],
                               dtype=torch.int64, device=device)
    return RankShare(meta.local_query_start_loc, meta.local_seq_lens, local_range, slot_mapping, indices, lens)


def gather_shares(share: RankShare, world_size: int) -> list[RankShare]:
    """All ranks' shares, on the host, in rank order."""
    gathered: dict[str, list[torch.Tensor]] = {}
    for field in dataclasses.fields(RankShare):
        tensor = getattr(share, field.name).contiguous()
        parts = [torch.empty_like(tensor) for _ in range(world_size)]
        dist.all_gather(parts, tensor)
        gathered[field.name] = [part.cpu() for part in parts]
    return [RankShare(**{name: parts[rank] for name, parts in gathered.items()}) for rank in range(world_size)]


def verify(case: CheckCase, batch: CaseBatch, shares: list[RankShare]) -> list[str]:
    """The cross-rank properties of the gathered shares; one message per violation."""
    failures = []
    world_size = len(shares)
    query_start_loc = batch.query_start_loc.long()
    query_lens = query_start_loc[1:] - query_start_loc[:-1]
    local_query_lens = torch.stack([(s.local_query_start_loc[1:] - s.local_query_start_loc[:-1]).long()
                                    for s in shares])  # [W, R]

    if not torch.equal(local_query_lens.sum(0), query_lens):
        failures.append(f"{case.name}: local query lengths sum to {local_query_lens.sum(0).tolist()} over ranks, "
                        f"global ones are {query_lens.tolist()}")
    for rank, share in enumerate(shares):
        local_start, local_end, max_query, max_seq = share.local_range.tolist()
        real_local = max(0, min(local_end, batch.num_tokens) - min(local_start, batch.num_tokens))
        if int(local_query_lens[rank].sum()) != real_local:
            failures.append(f"{case.name}: rank {rank} holds {int(local_query_lens[rank].sum())} tokens, its slice "
                            f"[{local_start}, {local_end}) holds {real_local} real tokens")
        # Causal: a rank's tokens do not see the request's tokens that other ranks report holding later.
        later = local_query_lens[rank + 1:].sum(0)
        seq = batch.seq_lens.long()
        expected = torch.where((local_query_lens[rank] > 0) & (seq > 0), (seq - later).clamp(min=0), 0)
        if not torch.equal(share.local_seq_lens.long(), expected):
            failures.append(f"{case.name}: rank {rank} local seq_lens {share.local_seq_lens.tolist()}, expected "
                            f"{expected.tolist()} from the tokens on later ranks")
        expected_max = (max([1, *local_query_lens[rank].tolist()]), max([1, *share.local_seq_lens.tolist()]))
        if (max_query, max_seq) != expected_max:
            failures.append(f"{case.name}: rank {rank} host maxima {(max_query, max_seq)}, its tensors give "
                            f"{expected_max}")

    slot_mappings = torch.stack([s.slot_mapping for s in shares])  # [W, T]
    owners = (slot_mappings != PAD_SLOT_ID).sum(0)
    if not bool((owners == 1).all()):
        bad = (owners != 1).nonzero().flatten()[:5].tolist()
        failures.append(f"{case.name}: tokens {bad} are stored on {owners[bad].tolist()} ranks, not exactly one")
    for rank in range(world_size):
        stored = slot_mappings[rank][slot_mappings[rank] != PAD_SLOT_ID]
        if stored.unique().numel() != stored.numel():
            failures.append(f"{case.name}: two tokens share a KV slot on rank {rank}")

    full_indices, full_lens = specops.dspark_swa_indices(
        batch.dspark_block_table, batch.query_start_loc, batch.seq_lens, window=case.window,
        num_speculative_tokens=case.num_speculative_tokens, block_size=case.block_size,
        num_tokens=-(-batch.num_input_tokens // world_size) * world_size)
    if not torch.equal(torch.cat([s.dspark_indices for s in shares]), full_indices):
        failures.append(f"{case.name}: the DSpark slices concatenated differ from the full padded table")
    if not torch.equal(torch.cat([s.dspark_lens for s in shares]), full_lens):
        failures.append(f"{case.name}: the DSpark lens concatenated differ from the full padded lens")
    return failures


def check_rank(rank: int, world_size: int, device: torch.device, cases: list[CheckCase] | None = None) -> list[str]:
    """Runs every case on this rank of the default process group; returns this rank's findings."""
    failures = []
    for case in cases if cases is not None else default_cases():
        batch = make_case_batch(case, world_size)
        shares = gather_shares(compute_share(case, batch, world_size, rank, device), world_size)
        failures += verify(case, batch, shares)
    return failures


def device_for(backend: str, local_rank: int) -> torch.device:
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    if backend == "hccl":
        import torch_npu  # noqa: F401  (registers the npu device and the hccl backend)

        torch.npu.set_device(local_rank)
        return torch.device("npu", local_rank)
    return torch.device("cpu")


def run_in_process_group(backend: str, device: torch.device | None = None, check=None) -> tuple[int, list[str], int]:
    """Entry point under torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT in the
    environment): returns this rank, its findings and the number of findings over all ranks.
    `check`: what the rank runs, as in run_local (default check_rank)."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = device or device_for(backend, int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=DEFAULT_TIMEOUT_S))
    try:
        failures = (check or check_rank)(rank, world_size, device)
        count = torch.tensor([len(failures)], device=device)
        dist.all_reduce(count)
    finally:
        dist.destroy_process_group()
    return rank, failures, int(count)


def _loopback_interface() -> str | None:
    for _, name in socket.if_nameindex():
        if name.startswith("lo"):
            return name
    return None


def _local_worker(rank: int, world_size: int, backend: str, port: int, timeout_s: float,
                  cases: list | None, results: multiprocessing.Queue, check=None) -> None:
    try:
        torch.set_num_threads(1)  # the ranks share this machine's cores
        loopback = _loopback_interface()
        if loopback is not None:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback)  # gloo talks over 127.0.0.1 only
        device = device_for(backend, rank)
        store = dist.TCPStore("127.0.0.1", port, world_size + 1, is_master=False,
                              timeout=datetime.timedelta(seconds=timeout_s))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
        # Every rank's connections are up before any rank can finish: a rank that rejects its
        # case at once would otherwise close them while a slower rank is still connecting.
        dist.barrier()
        try:
            results.put((rank, (check or check_rank)(rank, world_size, device, cases)))
        finally:
            dist.destroy_process_group()
    except BaseException:
        results.put((rank, [f"rank {rank} raised:\n{traceback.format_exc()}"]))
    # Interpreter shutdown after a gloo process group spends seconds in C++ static destructors;
    # once the findings are delivered the rank has nothing left to do.
    results.close()
    results.join_thread()
    os._exit(0)


def run_local(world_size: int, backend: str = "gloo", timeout_s: float = DEFAULT_TIMEOUT_S,
              cases: list | None = None, check=None) -> list[str]:
    """Starts world_size processes on this machine (rank i on device i for nccl / hccl), meeting
    at a store on 127.0.0.1, and runs `cases` (default_cases() when None); returns every rank's
    findings, empty when all checks hold. Ranks still running after timeout_s are terminated and
    reported. `check(rank, world_size, device, cases)`: what each rank runs, a module-level
    function (default check_rank; specops.pcp_distributed_check passes its own)."""
    # The parent hosts the rendezvous store on a port the OS picks, so no port can collide.
    store = dist.TCPStore("127.0.0.1", 0, world_size + 1, is_master=True,
                          timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
    # A fork server that imported specops once starts each rank without importing torch again;
    # ranks are never forked from this process, whose threads a fork would not carry over.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["specops.distributed_check"])
    results = context.Queue()
    processes = [context.Process(target=_local_worker, args=(rank, world_size, backend, store.port, timeout_s, cases,
                                                                  results, check))
                 for rank in range(world_size)]
    for process in processes:
        process.start()
    findings: dict[int, list[str]] = {}
    deadline = time.monotonic() + timeout_s
    while len(findings) < world_size and time.monotonic() < deadline:
        try:
            rank, failures = results.get(timeout=0.2)
        except queue.Empty:
            if not any(process.is_alive() for process in processes) and results.empty():
                break  # a rank died before reporting: waiting longer cannot help
            continue
        findings[rank] = failures
    for process in processes:
        process.join(timeout=max(deadline - time.monotonic(), 1.0))
        if process.is_alive():
            process.terminate()
            process.join()
    missing = [f"rank {rank} reported nothing (exit code {processes[rank].exitcode}, limit {timeout_s} s)"
               for rank in range(world_size) if rank not in findings]
    return [failure for rank in sorted(findings) for failure in findings[rank]] + missing


def command(argv: list[str] | None, prog: str, description: str, check, cases) -> int:
    """The command line of a multi-rank check (this module's and specops.pcp_distributed_check's):
    under torchrun, this rank's share of `check`; with --world-size, that many local processes.
    `cases`: the check's default cases, counted in the summary."""
    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="gloo", help="torch.distributed backend: gloo, nccl or hccl")
    parser.add_argument("--world-size", type=int, default=None,
                        help="start this many local processes (without it, join the torchrun process group)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds before a hung run fails")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    log = logging.getLogger(prog)
    if args.world_size is None:
        rank, failures, total = run_in_process_group(args.backend, check=check)
        for failure in failures:
            log.error("rank %d: %s", rank, failure)
        if rank == 0:
            log.info("%s: %s, %s ranks, %d cases: %s", prog, args.backend, os.environ["WORLD_SIZE"], len(cases),
                     "OK" if total == 0 else f"{total} failures")
        return 0 if total == 0 else 1
    failures = run_local(args.world_size, args.backend, args.timeout, check=check)
    for failure in failures:
        log.error("%s", failure)
    log.info("%s: %s, %d local processes, %d cases: %s", prog, args.backend, args.world_size, len(cases),
             "OK" if not failures else f"{len(failures)} failures")
    return 0 if not failures else 1


def main(argv: list[str] | None = None) -> int:
    return command(argv, "specops.distributed_check", __doc__, check_rank, default_cases())


if __name__ == "__main__":
    sys.exit(main())
