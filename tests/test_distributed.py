"""torch.distributed on vdev: the vccl backend (csrc/distributed/, torch_vdev/distributed.py).

Every collective runs on vdev tensors through vccl and on the same CPU tensors through
gloo in the same process group ("cpu:gloo,vdev:vccl"); the results must be identical.
Training (DDP, FSDP2, DTensor, ZeRO) on two and three processes must give the parameters
of the same training run on CPU in one process. Worker processes are reused across the tests
of a class (PyTorch's MultiProcContinuousTest); setups and faults get fresh ones
(MultiProcessTestCase).
"""

import datetime
import os
import subprocess
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.testing._internal.common_distributed import MultiProcContinuousTest, MultiProcessTestCase
from torch.testing._internal.common_utils import run_tests

import torch_vdev

VCCL = torch_vdev.distributed.BACKEND_NAME
DEVICE = torch_vdev.BACKEND_NAME
FLOATING = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTEGRAL = [torch.int8, torch.uint8, torch.int32, torch.int64]
# gloo moves the bytes of these without computing on them.
COPIED_ONLY = [torch.complex64, torch.bool]


def device_of_rank(rank: int) -> torch.device:
    # Each process is its own machine: ranks share device indices when there are
    # more ranks than VDEV_DEVICE_COUNT.
    return torch.device(DEVICE, rank % torch.vdev.device_count())


def rank_data(rank: int, shape, dtype, device, salt: int = 0) -> torch.Tensor:
    """Different values on each rank, small enough that sums and products stay exact."""
    generator = torch.Generator().manual_seed(1000 * rank + salt)
    if dtype.is_floating_point or dtype.is_complex:
        values = torch.randint(-4, 5, shape, generator=generator).to(dtype)
    elif dtype == torch.bool:
        values = torch.randint(0, 2, shape, generator=generator).bool()
    else:
        low = 0 if dtype == torch.uint8 else -3
        values = torch.randint(low, 4, shape, generator=generator).to(dtype)
    return values.to(device)


def flat(tensors):
    for item in tensors:
        if isinstance(item, (list, tuple)):
            yield from flat(item)
        elif item is not None:
            yield item


class VdevGroupTest(MultiProcContinuousTest):
    """One process per rank, each on its own vdev device, in a "cpu:gloo,vdev:vccl" group."""

    @classmethod
    def device_type(cls) -> str:
        return DEVICE

    @classmethod
    def _spawn_processes(cls, world_size) -> None:
        # PyTorch's harness asks for spawn but keeps a start method set earlier in the
        # process (an earlier test module's fork); vdev, like CUDA, needs spawn.
        torch.multiprocessing.set_start_method("spawn", force=True)
        # A device per rank: VDEV_DEVICE_COUNT, read by the spawned processes.
        previous = os.environ.get("VDEV_DEVICE_COUNT")
        os.environ["VDEV_DEVICE_COUNT"] = str(world_size)
        try:
            super()._spawn_processes(world_size)
        finally:
            if previous is None:
                del os.environ["VDEV_DEVICE_COUNT"]
            else:
                os.environ["VDEV_DEVICE_COUNT"] = previous

    @classmethod
    def _init_pg(cls, rank, world_size, rdvz_file):
        device = device_of_rank(rank)
        torch.vdev.set_device(device)
        dist.init_process_group(
            f"cpu:gloo,{DEVICE}:{VCCL}", rank=rank, world_size=world_size,
            store=dist.FileStore(rdvz_file, world_size), device_id=device,
            timeout=datetime.timedelta(seconds=60))

    @property
    def device(self) -> torch.device:
        return device_of_rank(self.rank)

    def assert_same_as_gloo(self, make, run):
        """Runs `run` on the tensors `make(device)` returns, on CPU (gloo) and on vdev
        (vccl), and checks every tensor ends up the same. gloo works on the vdev memory
        itself: the vdev run allocates no device memory."""
        cpu = make(torch.device("cpu"))
        run(cpu)
        on_device = make(self.device)
        # gloo's threads may still be freeing earlier collectives' memory, so the peak is
        # at most, not exactly, what was allocated before.
        allocated = torch.vdev.memory_allocated(self.device)
        torch.vdev.reset_peak_memory_stats(self.device)
        run(on_device)
        self.assertLessEqual(torch.vdev.max_memory_allocated(self.device), allocated)
        for expected, actual in zip(flat(cpu), flat(on_device), strict=True):
            self.assertEqual(actual.device, self.device)
            torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)


class CollectiveTests:
    """Mixed into VdevGroupTest classes of several world sizes."""

    def test_a_device_per_rank(self):
        self.assertEqual(torch.vdev.device_count(), self.world_size)
        devices = [None] * self.world_size
        dist.all_gather_object(devices, torch.vdev.current_device())
        self.assertEqual(devices, list(range(self.world_size)))

    def test_broadcast(self):
        for dtype in FLOATING + INTEGRAL + COPIED_ONLY:
            for src in range(self.world_size):
                self.assert_same_as_gloo(
                    lambda d: [rank_data(self.rank, (5, 3), dtype, d)],
                    lambda t: dist.broadcast(t[0], src=src))

    def test_all_reduce(self):
        for dtype in FLOATING + INTEGRAL:
            ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
            if not dtype.is_floating_point:
                ops += [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
            for op in ops:
                self.assert_same_as_gloo(
                    lambda d: [rank_data(self.rank, (7,), dtype, d), rank_data(self.rank, (2, 3), dtype, d, 1)],
                    lambda t: [dist.all_reduce(x, op=op) for x in t])

    def test_all_reduce_avg_and_premul_sum(self):
        # gloo has neither: the reference is gloo's SUM, divided or multiplied on CPU.
        factor = 0.25
        for dtype in [torch.float32, torch.float64, torch.bfloat16, torch.int64]:
            expected = rank_data(self.rank, (6,), dtype, "cpu")
            dist.all_reduce(expected)
            average = rank_data(self.rank, (6,), dtype, self.device)
            dist.all_reduce(average, op=dist.ReduceOp.AVG)
            if dtype.is_floating_point:
                torch.testing.assert_close(average.cpu(), expected / self.world_size, rtol=0, atol=0)
                scaled = rank_data(self.rank, (6,), dtype, self.device)
                dist.all_reduce(scaled, op=dist._make_nccl_premul_sum(factor))
                torch.testing.assert_close(scaled.cpu(), expected * factor, rtol=0, atol=0)
                scaled = rank_data(self.rank, (6,), dtype, self.device)
                tensor_factor = torch.tensor(factor, dtype=dtype, device=self.device)
                dist.all_reduce(scaled, op=dist._make_nccl_premul_sum(tensor_factor))
                torch.testing.assert_close(scaled.cpu(), expected * factor, rtol=0, atol=0)
            else:
                torch.testing.assert_close(
                    average.cpu(), torch.div(expected, self.world_size, rounding_mode="trunc"))
        output = torch.empty(3, device=self.device)
        inputs = rank_data(self.rank, (3 * self.world_size,), torch.float32, self.device)
        dist.reduce_scatter_tensor(output, inputs, op=dist.ReduceOp.AVG)
        expected = rank_data(self.rank, (3 * self.world_size,), torch.float32, "cpu")
        dist.all_reduce(expected)
        torch.testing.assert_close(
            output.cpu(), (expected / self.world_size)[3 * self.rank:3 * self.rank + 3])

    def test_reduce(self):
        for dtype in [torch.float32, torch.float16, torch.int32, torch.uint8]:
            for op in [dist.ReduceOp.SUM, dist.ReduceOp.MAX]:
                dst = self.world_size - 1
                self.assert_same_as_gloo(
                    lambda d: [rank_data(self.rank, (9,), dtype, d)],
                    lambda t: dist.reduce(t[0], dst=dst, op=op))
        average = rank_data(self.rank, (4,), torch.float64, self.device)
        dist.reduce(average, dst=0, op=dist.ReduceOp.AVG)
        expected = rank_data(self.rank, (4,), torch.float64, "cpu")
        dist.all_reduce(expected)
        if self.rank == 0:
            torch.testing.assert_close(average.cpu(), expected / self.world_size, rtol=0, atol=0)

    def test_all_gather(self):
        for dtype in FLOATING + INTEGRAL + COPIED_ONLY:
            self.assert_same_as_gloo(
                lambda d: [[torch.zeros(4, 2, dtype=dtype, device=d) for _ in range(self.world_size)],
                           rank_data(self.rank, (4, 2), dtype, d)],
                lambda t: dist.all_gather(t[0], t[1]))
            self.assert_same_as_gloo(
                lambda d: [torch.zeros(4 * self.world_size, 2, dtype=dtype, device=d),
                           rank_data(self.rank, (4, 2), dtype, d)],
                lambda t: dist.all_gather_into_tensor(t[0], t[1]))

    def test_gather_and_scatter(self):
        for dtype in [torch.float32, torch.bfloat16, torch.int64, torch.bool]:
            root = self.world_size - 1
            self.assert_same_as_gloo(
                lambda d: [[torch.zeros(3, dtype=dtype, device=d) for _ in range(self.world_size)]
                           if self.rank == root else None,
                           rank_data(self.rank, (3,), dtype, d)],
                lambda t: dist.gather(t[1], t[0], dst=root))
            self.assert_same_as_gloo(
                lambda d: [torch.zeros(3, dtype=dtype, device=d),
                           [rank_data(self.rank, (3,), dtype, d, r) for r in range(self.world_size)]
                           if self.rank == root else None],
                lambda t: dist.scatter(t[0], t[1], src=root))

    def test_reduce_scatter(self):
        for dtype in [torch.float32, torch.float64, torch.int32]:
            for op in [dist.ReduceOp.SUM, dist.ReduceOp.MIN]:
                self.assert_same_as_gloo(
                    lambda d: [torch.zeros(2, 3, dtype=dtype, device=d),
                               [rank_data(self.rank, (2, 3), dtype, d, r) for r in range(self.world_size)]],
                    lambda t: dist.reduce_scatter(t[0], t[1], op=op))
                self.assert_same_as_gloo(
                    lambda d: [torch.zeros(2, 3, dtype=dtype, device=d),
                               rank_data(self.rank, (2 * self.world_size, 3), dtype, d)],
                    lambda t: dist.reduce_scatter_tensor(t[0], t[1], op=op))

    def test_all_to_all(self):
        n = self.world_size
        for dtype in [torch.float32, torch.int64, torch.bool]:
            self.assert_same_as_gloo(
                lambda d: [[torch.zeros(2, dtype=dtype, device=d) for _ in range(n)],
                           [rank_data(self.rank, (2,), dtype, d, r) for r in range(n)]],
                lambda t: dist.all_to_all(t[0], t[1]))
            self.assert_same_as_gloo(
                lambda d: [torch.zeros(3 * n, dtype=dtype, device=d), rank_data(self.rank, (3 * n,), dtype, d)],
                lambda t: dist.all_to_all_single(t[0], t[1]))
        # Uneven splits: rank r sends r + 1 + j elements to rank j.
        input_splits = [self.rank + 1 + j for j in range(n)]
        output_splits = [r + 1 + self.rank for r in range(n)]
        self.assert_same_as_gloo(
            lambda d: [torch.zeros(sum(output_splits), 2, device=d),
                       rank_data(self.rank, (sum(input_splits), 2), torch.float32, d)],
            lambda t: dist.all_to_all_single(t[0], t[1], output_splits, input_splits))

    def test_coalesced(self):
        n = self.world_size

        def coalesced_all_gather(t):
            with dist._coalescing_manager(async_ops=True) as manager:
                dist.all_gather_into_tensor(t[0], t[1])
                dist.all_gather_into_tensor(t[2], t[3])
            manager.wait()

        def coalesced_reduce_scatter(t):
            with dist._coalescing_manager(async_ops=True) as manager:
                dist.reduce_scatter_tensor(t[0], t[1])
                dist.reduce_scatter_tensor(t[2], t[3])
            manager.wait()

        self.assert_same_as_gloo(
            lambda d: [torch.zeros(2 * n, device=d), rank_data(self.rank, (2,), torch.float32, d),
                       torch.zeros(3 * n, dtype=torch.int64, device=d), rank_data(self.rank, (3,), torch.int64, d)],
            coalesced_all_gather)
        self.assert_same_as_gloo(
            lambda d: [torch.zeros(2, device=d), rank_data(self.rank, (2 * n,), torch.float32, d),
                       torch.zeros(3, device=d), rank_data(self.rank, (3 * n,), torch.float32, d, 1)],
            coalesced_reduce_scatter)
        self.assert_same_as_gloo(
            lambda d: [rank_data(self.rank, (4,), torch.float64, d), rank_data(self.rank, (2, 2), torch.float64, d, 1)],
            lambda t: dist.all_reduce_coalesced(t))

    def test_point_to_point(self):
        n = self.world_size
        right, left = (self.rank + 1) % n, (self.rank - 1) % n

        def ring_blocking(t):
            # Even ranks send first, odd ranks receive first: no cycle of waits.
            if self.rank % 2 == 0:
                dist.send(t[0], right)
                dist.recv(t[1], left)
            else:
                dist.recv(t[1], left)
                dist.send(t[0], right)

        def ring_async(t):
            works = [dist.isend(t[0], right), dist.irecv(t[1], left)]
            for work in works:
                work.wait()

        def ring_batched(t):
            ops = [dist.P2POp(dist.isend, t[0], right), dist.P2POp(dist.irecv, t[1], left)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()

        for run in [ring_blocking, ring_async, ring_batched]:
            self.assert_same_as_gloo(
                lambda d: [rank_data(self.rank, (5,), torch.float32, d), torch.zeros(5, device=d)], run)
        received = torch.zeros(3, device=self.device)
        work = dist.irecv(received, left)
        dist.isend(rank_data(self.rank, (3,), torch.float32, self.device), right).wait()
        (value,) = work.get_future().wait()
        self.assertEqual(value.device, self.device)
        torch.testing.assert_close(value.cpu(), rank_data(left, (3,), torch.float32, "cpu"))

    def test_async_work_and_future(self):
        tensor = rank_data(self.rank, (8,), torch.float32, self.device)
        expected = rank_data(self.rank, (8,), torch.float32, "cpu")
        dist.all_reduce(expected)
        work = dist.all_reduce(tensor, async_op=True)
        doubled = work.get_future().then(lambda future: future.value()[0] * 2)
        self.assertTrue(work.wait())
        torch.testing.assert_close(tensor.cpu(), expected)
        self.assertEqual(doubled.wait().device, self.device)
        torch.testing.assert_close(doubled.wait().cpu(), expected * 2)
        self.assertTrue(work.is_completed())
        self.assertEqual(work.result()[0].data_ptr(), tensor.data_ptr())
        # AVG's division is part of the work, whichever way it is waited for.
        average = rank_data(self.rank, (8,), torch.float32, self.device)
        (value,) = dist.all_reduce(average, op=dist.ReduceOp.AVG, async_op=True).get_future().wait()
        torch.testing.assert_close(value.cpu(), expected / self.world_size)

    def test_future_of_every_collective(self):
        """get_future() of each asynchronous collective gives what the synchronous
        collective on CPU tensors with gloo gives (gloo's own reduce_scatter works have
        no future; vccl's have, as NCCL's)."""
        n = self.world_size
        cases = [
            lambda d, async_op: (lambda out: (dist.reduce_scatter_tensor(
                out, rank_data(self.rank, (2 * n,), torch.float32, d), async_op=async_op), out))(
                torch.zeros(2, device=d)),
            lambda d, async_op: (lambda out: (dist.reduce_scatter(
                out, [rank_data(self.rank, (3,), torch.float32, d, r) for r in range(n)], async_op=async_op), out))(
                torch.zeros(3, device=d)),
            lambda d, async_op: (lambda out: (dist.all_gather_into_tensor(
                out, rank_data(self.rank, (2,), torch.int32, d), async_op=async_op), out))(
                torch.zeros(2 * n, dtype=torch.int32, device=d)),
            lambda d, async_op: (lambda out: (dist.broadcast(out, src=n - 1, async_op=async_op), out))(
                rank_data(self.rank, (4,), torch.float64, d)),
            lambda d, async_op: (lambda out: (dist.all_to_all_single(
                out, rank_data(self.rank, (n,), torch.float32, d), async_op=async_op), out))(
                torch.zeros(n, device=d)),
        ]
        for case in cases:
            _, expected = case(torch.device("cpu"), False)
            work, output = case(self.device, True)
            (value,) = work.get_future().wait()
            self.assertEqual(value.data_ptr(), output.data_ptr())
            torch.testing.assert_close(value.cpu(), expected, rtol=0, atol=0)

    def test_calls_compared_in_shared_memory(self):
        # The ranks are processes of one host: their calls meet on a shared-memory
        # board, not in a gloo all_gather (TestFallbacks covers that one).
        backend = dist.group.WORLD._get_backend(self.device)
        self.assertTrue(torch_vdev._C.compares_calls_in_shared_memory(backend))

    def test_stream_order(self):
        # Work queued on a side stream before the collective is what it reduces; work
        # queued after wait() sees its result.
        stream = torch.vdev.Stream()
        with torch.vdev.stream(stream):
            tensor = torch.full((4,), float(self.rank + 1), device=self.device)
            tensor.mul_(2)
            work = dist.all_reduce(tensor, async_op=True)
            work.wait()
            tensor.add_(1)
        stream.synchronize()
        total = sum(2.0 * (r + 1) for r in range(self.world_size))
        torch.testing.assert_close(tensor.cpu(), torch.full((4,), total + 1))

    def test_collectives_wait_for_pending_kernels(self):
        """Kernels still queued on the current stream when a collective is called (a
        sleep, an in-place op and a copy queued behind it): the collective communicates
        what they write. After Work.wait(), work queued on the current stream sees the
        result."""
        total = sum(2.0 * (r + 1) for r in range(self.world_size))
        tensor = torch.full((4,), float(self.rank + 1), device=self.device)
        tensor.clone().mul_(2)  # the first launch of its dtypes waits for its kernel: not behind the sleep
        torch.vdev._sleep(200)
        tensor.mul_(2)
        self.assertFalse(torch.vdev.current_stream().query())  # mul_ is still queued
        dist.all_reduce(tensor)
        torch.testing.assert_close(tensor.cpu(), torch.full((4,), total))

        gathered = torch.zeros(self.world_size, device=self.device)
        mine = torch.zeros(1, device=self.device)
        torch.vdev._sleep(200)
        mine.copy_(torch.full((1,), self.rank + 1.0, device=self.device))
        if self.rank == 0:
            time.sleep(0.2)  # the others' collective starts before rank 0 joins it
        work = dist.all_gather_into_tensor(gathered, mine, async_op=True)
        work.wait()
        result = torch.zeros(self.world_size, device=self.device)
        torch.vdev._sleep(100)
        result.copy_(gathered)  # queued behind the sleep, after the wait
        torch.testing.assert_close(result.cpu(), torch.arange(1.0, self.world_size + 1))

    def test_collectives_after_waits_wait_for_kernels_queued_since(self):
        """Back-to-back collectives with Work.wait() between them, the current stream
        given kernels (queued behind a sleep) between a collective's call and its wait,
        after the wait, or nothing: each collective communicates what the kernels queued
        before its call wrote, as the same calls on CPU tensors with gloo."""

        def run(device):
            tensor = torch.full((8,), float(self.rank + 1), device=device)
            for _ in range(3):
                dist.all_reduce(tensor)  # each reduces the last one's result
            between = torch.zeros(8, device=device)
            work = dist.all_reduce(tensor, async_op=True)
            if device != "cpu":
                torch.vdev._sleep(200)
            between.fill_(self.rank + 3.0)  # between the call and its wait
            work.wait()
            dist.all_reduce(between)
            if device != "cpu":
                torch.vdev._sleep(200)
            tensor.add_(between)  # after the wait
            dist.all_reduce(tensor)
            return torch.cat([tensor, between]).cpu()

        torch.testing.assert_close(run(self.device), run("cpu"), rtol=0, atol=0)

    def test_call_returns_before_its_stream_and_peers(self):
        """A collective's call returns at once, as NCCL's: before its stream ran the
        kernels queued before it, and before the other ranks called it (rank 0 calls it
        before a CPU collective, the others after: if rank 0's call waited for theirs,
        neither would return). The collective still reduces what those kernels wrote,
        and work queued after Work.wait() sees the result; both as gloo on CPU."""
        expected = torch.full((64,), float(self.rank + 1)) * 2
        dist.all_reduce(expected)
        tensor = torch.full((64,), float(self.rank + 1), device=self.device)
        tensor.clone().mul_(2)  # the first launch of its dtypes waits for its kernel: not behind the sleep
        torch.vdev._sleep(1000)
        tensor.mul_(2)  # queued behind the sleep
        cpu_meeting = torch.zeros(1)
        if self.rank != 0:
            dist.all_reduce(cpu_meeting)
        work = dist.all_reduce(tensor, async_op=True)
        self.assertFalse(torch.vdev.current_stream().query())  # still sleeping
        if self.rank == 0:
            dist.all_reduce(cpu_meeting)
        work.wait()
        result = tensor + 1  # queued behind the wait
        torch.testing.assert_close(result.cpu(), expected + 1, rtol=0, atol=0)
        self.assertTrue(work.is_completed())

    def test_queued_collectives_keep_their_order(self):
        """Collectives called back to back on two streams, each behind kernels still
        queued, reach gloo in call order on every rank: each communicates what its own
        stream wrote before the call, as the same collectives on CPU tensors with gloo."""
        n = self.world_size

        def run(device, streams):
            outputs, works = [], []
            for i in range(6):
                with torch.vdev.stream(streams[i % 2]) if streams else torch.device(device):
                    if streams:
                        torch.vdev._sleep(50)
                    tensor = rank_data(self.rank, (5,), torch.float32, device, salt=i)
                    tensor.mul_(i + 1)
                    if i % 3 == 0:
                        works.append(dist.all_reduce(tensor, async_op=True))
                        outputs.append(tensor)
                    elif i % 3 == 1:
                        works.append(dist.broadcast(tensor, src=i % n, async_op=True))
                        outputs.append(tensor)
                    else:
                        gathered = torch.zeros(5 * n, device=device)
                        works.append(dist.all_gather_into_tensor(gathered, tensor, async_op=True))
                        outputs.append(gathered)
            for i, work in enumerate(works):
                with torch.vdev.stream(streams[i % 2]) if streams else torch.device(device):
                    work.wait()
            if streams:
                torch.vdev.synchronize()  # the side stream's waits, before the reads below
            return [output.cpu() for output in outputs]

        expected = run(torch.device("cpu"), None)
        actual = run(self.device, [torch.vdev.current_stream(), torch.vdev.Stream()])
        for got, want in zip(actual, expected, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)

    def test_mismatch_raises_where_waited_for(self):
        """A mismatch found while communicating fails the work, as NCCL's asynchronous
        errors: the future is complete at the call (as NCCL's), and a stream that waits
        for it (the future's wait(), Work.wait()) raises the error at its next
        synchronization; a Work.wait() once the work failed raises on the host. The
        group stays usable."""
        # Each collective is queued behind a sleep, so it has not failed yet when waited
        # for (a wait for a work already known to have failed raises on the host).
        torch.vdev._sleep(500)
        work = dist.all_reduce(torch.ones(2 + self.rank, device=self.device), async_op=True)
        pattern = rf"{VCCL} all_reduce: the ranks' calls do not match \(their sizes differ\)"
        future = work.get_future()
        self.assertTrue(future.done())
        (value,) = future.wait()  # makes the current stream wait: the host goes on
        self.assertEqual(value.device, self.device)
        with self.assertRaisesRegex(RuntimeError, "Work.wait: " + pattern):
            torch.vdev.current_stream().synchronize()
        self.assertTrue(work.is_completed())
        self.assertFalse(work.is_success())
        with self.assertRaisesRegex(RuntimeError, pattern):
            work.wait()
        # Only the streams that waited for the failed collective get its error.
        torch.vdev._sleep(500)
        work = dist.all_reduce(torch.ones(2 + self.rank, device=self.device), async_op=True)
        side = torch.vdev.Stream()
        with torch.vdev.stream(side):
            work.wait()
        with self.assertRaisesRegex(RuntimeError, "Work.wait: " + pattern):
            side.synchronize()
        torch.vdev.current_stream().synchronize()  # the current stream did not wait: no error
        tensor = torch.full((3,), float(self.rank), device=self.device)
        dist.all_reduce(tensor)
        torch.testing.assert_close(tensor.cpu(), torch.full((3,), float(sum(range(self.world_size)))))
        torch.vdev.synchronize()  # nothing left over on any stream

    def test_collectives_refused_while_capturing(self):
        tensor = torch.ones(4, device=self.device)
        with self.assertRaisesRegex(RuntimeError, f"{VCCL} all_reduce: cannot run a collective on a stream that is capturing a graph"):
            with torch.vdev.graph(torch.vdev.VDEVGraph()):
                dist.all_reduce(tensor)
        dist.all_reduce(tensor)
        torch.testing.assert_close(tensor.cpu(), torch.full((4,), float(self.world_size)))

    def test_barriers(self):
        dist.barrier()
        dist.barrier(device_ids=[self.device.index])
        # torch.distributed.monitored_barrier accepts only groups whose backend string
        # is "gloo"; vccl's own monitored barrier is reached through the group.
        backend = dist.group.WORLD._get_backend(self.device)
        self.assertEqual(backend.name(), VCCL)
        backend.monitored_barrier(datetime.timedelta(seconds=30), wait_all_ranks=True)

    def test_mismatched_calls(self):
        """Ranks whose calls differ in sizes, dtypes or collectives get an error naming
        each rank's call, on every rank, before anything is sent (gloo would abort the
        process on a size mismatch and compute garbage on dtypes of one size); the group
        stays usable. As NCCL's errors found while communicating, it raises where the
        collective is waited for: here the stream's next synchronization, behind the
        wait a collective without async_op queues."""
        other_size = self.rank % 2  # rank 1 differs from rank 0 (and rank 2 from rank 1)
        floating = torch.float32 if other_size == 0 else torch.int32  # same itemsize
        calls = [
            ("all_reduce", "sizes", r"all_reduce\(float32, sizes \[4\], SUM\); rank 1: all_reduce\(float32, sizes \[8\], SUM\)",
             lambda: dist.all_reduce(torch.ones(4 + 4 * other_size, device=self.device))),
            ("all_reduce", "dtypes", r"all_reduce\(float32, sizes \[4\], SUM\); rank 1: all_reduce\(int32, sizes \[4\], SUM\)",
             lambda: dist.all_reduce(torch.ones(4, device=self.device, dtype=floating))),
            ("broadcast", "sizes", r"broadcast\(float32, sizes \[3\], root 0\); rank 1: broadcast\(float32, sizes \[3, 2\], root 0\)",
             lambda: dist.broadcast(torch.ones((3, 2) if other_size else (3,), device=self.device), src=0)),
            ("broadcast", "dtypes", r"broadcast\(float32, sizes \[3\], root 0\); rank 1: broadcast\(int32, sizes \[3\], root 0\)",
             lambda: dist.broadcast(torch.ones(3, device=self.device, dtype=floating), src=0)),
            ("all_gather_into_tensor", "sizes", r"all_gather_into_tensor\(float32, sizes \[2\]\); rank 1: all_gather_into_tensor\(float32, sizes \[3\]\)",
             lambda: dist.all_gather_into_tensor(
                 torch.zeros(self.world_size * (2 + other_size), device=self.device),
                 torch.ones(2 + other_size, device=self.device))),
            ("all_gather_into_tensor", "dtypes", r"all_gather_into_tensor\(float32, sizes \[2\]\); rank 1: all_gather_into_tensor\(int32, sizes \[2\]\)",
             lambda: dist.all_gather_into_tensor(
                 torch.zeros(self.world_size * 2, device=self.device, dtype=floating),
                 torch.ones(2, device=self.device, dtype=floating))),
            ("reduce_scatter_tensor", "sizes", rf"reduce_scatter_tensor\(float32, sizes \[{self.world_size}\], SUM\); rank 1: reduce_scatter_tensor\(float32, sizes \[{2 * self.world_size}\], SUM\)",
             lambda: dist.reduce_scatter_tensor(
                 torch.zeros(1 + other_size, device=self.device),
                 torch.ones(self.world_size * (1 + other_size), device=self.device))),
            ("reduce_scatter_tensor", "dtypes", rf"reduce_scatter_tensor\(float32, sizes \[{self.world_size}\], SUM\); rank 1: reduce_scatter_tensor\(int32, sizes \[{self.world_size}\], SUM\)",
             lambda: dist.reduce_scatter_tensor(
                 torch.zeros(1, device=self.device, dtype=floating),
                 torch.ones(self.world_size, device=self.device, dtype=floating))),
            ("all_reduce", "collectives", r"all_reduce\(float32, sizes \[4\], SUM\); rank 1: broadcast\(float32, sizes \[4\], root 0\)",
             lambda: dist.broadcast(torch.ones(4, device=self.device), src=0) if other_size
             else dist.all_reduce(torch.ones(4, device=self.device))),
        ]
        for op, differing, calls_named, call in calls:
            if op == "all_reduce" and differing == "collectives" and other_size:
                op = "broadcast"
            pattern = rf"{VCCL} {op}: the ranks' calls do not match \(their {differing} differ\): rank 0: {calls_named}"
            with self.assertRaisesRegex(RuntimeError, pattern):
                call()
                torch.vdev.synchronize()
            # Nothing was sent: the group still works.
            tensor = torch.full((3,), float(self.rank))
            dist.all_reduce(tensor)
            torch.testing.assert_close(tensor, torch.full((3,), float(sum(range(self.world_size)))))
            on_device = torch.ones(5, device=self.device)
            dist.all_reduce(on_device)
            torch.testing.assert_close(on_device.cpu(), torch.full((5,), float(self.world_size)))

    def test_wait_makes_the_stream_wait(self):
        """Work.wait() makes the current stream wait for the collective, as NCCL's: the
        host returns while the collective is still under way (the other ranks' streams
        are busy for 2 s before they join it), and work queued after wait() sees the
        result. Rank 0 checks right after wait() returns, long before the others join."""
        dist.barrier()  # the ranks start together (a barrier's wait blocks the host)
        tensor = torch.full((4,), float(self.rank + 1), device=self.device)
        if self.rank != 0:
            torch.vdev._sleep(2000)
        work = dist.all_reduce(tensor, async_op=True)
        work.wait()
        if self.rank == 0:
            self.assertFalse(work.is_completed())
            self.assertFalse(torch.vdev.current_stream().query())
        tensor.add_(1)  # queued behind the wait
        total = sum(range(1, self.world_size + 1))
        torch.testing.assert_close(tensor.cpu(), torch.full((4,), total + 1.0))
        self.assertTrue(work.is_completed())
        # dist.all_reduce without async_op waits the same way: the host goes on at once.
        dist.barrier()
        if self.rank != 0:
            torch.vdev._sleep(2000)
        synchronous = torch.full((4,), float(self.rank + 1), device=self.device)
        dist.all_reduce(synchronous, op=dist.ReduceOp.AVG)
        if self.rank == 0:
            self.assertFalse(torch.vdev.current_stream().query())
        torch.testing.assert_close(synchronous.cpu(), torch.full((4,), total / self.world_size))

    def test_host_waits_while_a_python_callback_finishes_the_collective(self):
        """The host waits for a stream whose queued Work.wait() needs gloo's thread to
        run a Python `then` callback (which takes the GIL): the host's wait releases the
        GIL, so neither deadlocks. Rank 0 waits in torch.vdev.synchronize() while the
        others join 1 s later; the callback's result is checked after."""
        dist.barrier()
        tensor = torch.full((4,), float(self.rank + 1), device=self.device)
        if self.rank != 0:
            torch.vdev._sleep(1000)
        work = dist.all_reduce(tensor, async_op=True)
        doubled = work.get_future().then(lambda future: future.value()[0] * 2)
        work.wait()
        torch.vdev.synchronize()
        total = float(sum(range(1, self.world_size + 1)))
        torch.testing.assert_close(doubled.wait().cpu(), torch.full((4,), 2 * total))
        torch.testing.assert_close(tensor.cpu(), torch.full((4,), total))

    def test_new_group(self):
        members = [0, self.world_size - 1]
        group = dist.new_group(members)
        vdev_only = dist.new_group(backend=VCCL)
        if self.rank in members:
            self.assert_same_as_gloo(
                lambda d: [rank_data(self.rank, (4,), torch.float32, d)],
                lambda t: dist.all_reduce(t[0], group=group))
        tensor = rank_data(self.rank, (4,), torch.int64, self.device)
        dist.all_reduce(tensor, group=vdev_only)
        expected = rank_data(self.rank, (4,), torch.int64, "cpu")
        dist.all_reduce(expected)
        torch.testing.assert_close(tensor.cpu(), expected)
        self.assertEqual(dist.get_backend(vdev_only), VCCL)
        dist.destroy_process_group(vdev_only)
        dist.destroy_process_group(group)

    def test_object_collectives(self):
        # On a vccl-only group the objects travel as vdev tensors.
        vdev_only = dist.new_group(backend=VCCL)
        for group in [None, vdev_only]:
            gathered = [None] * self.world_size
            dist.all_gather_object(gathered, {"rank": self.rank, "name": "x" * self.rank}, group=group)
            self.assertEqual(gathered, [{"rank": r, "name": "x" * r} for r in range(self.world_size)])
            objects = [self.rank, "from rank"] if self.rank == 1 else [None, None]
            dist.broadcast_object_list(objects, src=1, group=group)
            self.assertEqual(objects, [1, "from rank"])
        dist.destroy_process_group(vdev_only)

    def test_bad_input(self):
        # Errors raised before any communication, on every rank alike.
        other = torch.device(DEVICE, (self.device.index + 1) % torch.vdev.device_count())
        output = [torch.zeros(2, device=self.device) for _ in range(self.world_size)]
        output[-1] = torch.zeros(2)
        with self.assertRaisesRegex(RuntimeError, f"expected {DEVICE} tensors but got a tensor on cpu"):
            dist.all_gather(output, torch.ones(2, device=self.device))
        if other != self.device:
            with self.assertRaisesRegex(RuntimeError, f"tensor on {other} but this process group is bound to {self.device}"):
                dist.all_reduce(torch.ones(2, device=other))
        with self.assertRaisesRegex(RuntimeError, "expected all tensors on one device"):
            dist.all_to_all(
                [torch.zeros(1, device=self.device) for _ in range(self.world_size)],
                [torch.zeros(1, device=other if other != self.device else "cpu") for _ in range(self.world_size)])
        dist.barrier()

    def test_bad_arguments_raise_at_the_call(self):
        """What gloo checks of one rank's arguments raises at the call on vdev, as
        ProcessGroupNCCL's checks do, although vccl hands collectives to gloo later, on
        the communication worker. The reference: the same call on CPU tensors fails with
        gloo, with gloo's words where vccl keeps them. Nothing is sent, so the group
        stays usable. The CPU calls run in a group of this rank alone: gloo runs some
        checks only in its work, after messages of other ranks may have been exchanged,
        and a failure there leaves a group's ranks out of step. So do the vdev calls
        whose checks depend on being the root (no rank waits for a root that failed)."""
        world = dist.group.WORLD
        alone = [dist.new_group([rank]) for rank in range(self.world_size)][self.rank]

        def zeros(device, *sizes, dtype=torch.float32):
            return torch.zeros(*sizes, dtype=dtype, device=device)

        # op, vccl's problem (regex, of the group size n), gloo's message on CPU
        # (regex; None: a failed CHECK of gloo's), the call (device, group, n)
        cases = [
            ("all_gather", lambda n: rf"invalid tensor size at index {n - 1} \(expected \(4\), got \(3\)\)",
             r"invalid tensor size at index \d \(expected \(4\), got \(3\)\)",
             lambda d, g, n: dist.all_gather([zeros(d, 4)] * (n - 1) + [zeros(d, 3)], zeros(d, 4), group=g, async_op=True)),
            ("all_gather", lambda n: rf"invalid output tensor list \(expected length {n}, got {n + 1}\)",
             r"invalid output tensor list at index 0 \(expected length \d+, got \d+\)",
             lambda d, g, n: dist.all_gather([zeros(d, 4)] * (n + 1), zeros(d, 4), group=g, async_op=True)),
            ("all_gather_into_tensor",
             lambda n: rf"the output tensor must have the group size \({n}\) times the input tensor's 4 elements, but has {4 * n - 1}",
             "invalid tensor size", lambda d, g, n: dist.all_gather_into_tensor(zeros(d, 4 * n - 1), zeros(d, 4), group=g, async_op=True)),
            ("all_gather_into_tensor", lambda n: r"the output and input tensors differ in dtype \(float64 and float32\)",
             "invalid tensor type",
             lambda d, g, n: dist.all_gather_into_tensor(zeros(d, 4 * n, dtype=torch.float64), zeros(d, 4), group=g, async_op=True)),
            ("reduce_scatter", lambda n: rf"invalid tensor size at index {n - 1} \(expected \(4\), got \(3\)\)", None,
             lambda d, g, n: dist.reduce_scatter(zeros(d, 4), [zeros(d, 4)] * (n - 1) + [zeros(d, 3)], group=g, async_op=True)),
            ("reduce_scatter_tensor",
             lambda n: rf"the input tensor must have the group size \({n}\) times the output tensor's 4 elements, but has {4 * n + 1}",
             None, lambda d, g, n: dist.reduce_scatter_tensor(zeros(d, 4), zeros(d, 4 * n + 1), group=g, async_op=True)),
            ("all_to_all_single", lambda n: rf"the output tensor must have the input tensor's {2 * n} elements, but has {3 * n}",
             r"in->size == out->size", lambda d, g, n: dist.all_to_all_single(zeros(d, 3 * n), zeros(d, 2 * n), group=g, async_op=True)),
            ("all_to_all_single", lambda n: rf"the output split sizes sum to {n + 1} but the output tensor's dim 0 is {n}",
             "Split sizes doesn't match total dim 0 size",
             lambda d, g, n: dist.all_to_all_single(zeros(d, n), zeros(d, n), [1] * (n - 1) + [2], [1] * n, group=g, async_op=True)),
            ("all_reduce", lambda n: "Cannot use ReduceOp.BAND with non-integral dtype float32",
             "Cannot use ReduceOp.BAND with non-integral dtype",
             lambda d, g, n: dist.all_reduce(zeros(d, 4), op=dist.ReduceOp.BAND, group=g, async_op=True)),
            ("all_reduce", lambda n: "unsupported dtype uint16", "Invalid scalar type",
             lambda d, g, n: dist.all_reduce(zeros(d, 4, dtype=torch.uint16), group=g, async_op=True)),
            ("broadcast", lambda n: "unsupported dtype float8_e4m3fn", "Invalid scalar type",
             lambda d, g, n: dist.broadcast(zeros(d, 4, dtype=torch.float8_e4m3fn), src=dist.get_global_rank(g, 0), group=g, async_op=True)),
        ]
        on_root = [
            ("gather", lambda n: r"invalid tensor size at index 0 \(expected \(4\), got \(3\)\)",
             r"invalid tensor size at index 0 \(expected \(4\), got \(3\)\)",
             lambda d, g, n: dist.gather(zeros(d, 4), [zeros(d, 3)], dst=self.rank, group=g, async_op=True)),
            ("scatter", lambda n: r"invalid tensor size at index 0 \(expected \(4\), got \(3\)\)",
             r"invalid tensor size at index 0 \(expected \(4\), got \(3\)\)",
             lambda d, g, n: dist.scatter(zeros(d, 4), [zeros(d, 3)], src=self.rank, group=g, async_op=True)),
        ]
        for group, group_cases in [(world, cases), (alone, cases + on_root)]:
            n = dist.get_world_size(group)
            for op, problem, gloo_message, call in group_cases:
                with self.subTest(op=op, problem=problem(n), ranks=n):
                    with self.assertRaisesRegex(RuntimeError, gloo_message or "Check failed"):
                        call(torch.device("cpu"), alone, 1).wait()
                    with self.assertRaisesRegex(RuntimeError, f"^{VCCL} {op}: {problem(n)}"):
                        call(self.device, group, n)  # raises here, without wait()
        tensor = torch.full((3,), float(self.rank), device=self.device)
        dist.all_reduce(tensor)
        torch.testing.assert_close(tensor.cpu(), torch.full((3,), float(sum(range(self.world_size)))))

def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))


class SmallModel(nn.Module):
    """small_model(), with a layer the forward does not use if `with_unused_layer`
    (which DDP's find_unused_parameters must find)."""

    def __init__(self, with_unused_layer: bool):
        super().__init__()
        self.body = small_model()
        if with_unused_layer:
            self.unused = nn.Linear(2, 2)

    def forward(self, inputs):
        return self.body(inputs)


def batch(step: int, world_size: int) -> torch.Tensor:
    torch.manual_seed(100 + step)
    return torch.randn(4 * world_size, 8)


def train(model, optimizer, inputs_of_step, steps=3, forward=None):
    for step in range(steps):
        optimizer.zero_grad()
        (forward or model)(inputs_of_step(step)).square().mean().backward()
        optimizer.step()


class TrainingTests:
    """Each process trains on its share of every batch, against one CPU process training
    on whole batches. Mixed into VdevGroupTest classes of several world sizes."""

    def reference(self, steps=3, optimizer=torch.optim.SGD, **kwargs):
        model = small_model()
        train(model, optimizer(model.parameters(), lr=0.1, **kwargs), lambda s: batch(s, self.world_size), steps)
        return list(model.parameters())

    def local_batch(self, step):
        return batch(step, self.world_size).chunk(self.world_size)[self.rank].to(self.device)

    def assert_parameters_equal(self, actual, expected):
        for a, e in zip(actual, expected, strict=True):
            self.assertEqual(a.device, self.device)
            torch.testing.assert_close(a.detach().cpu(), e.detach(), rtol=1e-5, atol=1e-6)

    def test_ddp(self):
        from torch.nn.parallel import DistributedDataParallel as DDP

        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        expected = self.reference()
        for options in [dict(bucket_cap_mb=0.0005), dict(find_unused_parameters=True), dict(static_graph=True),
                        dict(gradient_as_bucket_view=True), dict(comm_hook=default_hooks.allreduce_hook)]:
            comm_hook = options.pop("comm_hook", None)
            unused = options.get("find_unused_parameters", False)
            module = SmallModel(with_unused_layer=unused).to(self.device)
            model = DDP(module, device_ids=[self.device.index], **options)
            if comm_hook is not None:  # a Python hook: futures of vccl works, chained with then()
                model.register_comm_hook(None, comm_hook)
            train(model, torch.optim.SGD(model.parameters(), lr=0.1), self.local_batch)
            self.assert_parameters_equal(module.body.parameters(), expected)
            if unused:
                self.assertIsNone(module.unused.weight.grad)

    def test_ddp_no_sync(self):
        from torch.nn.parallel import DistributedDataParallel as DDP

        # Gradients accumulated over two micro-batches without communication, then synced.
        model = DDP(small_model().to(self.device))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        micro = self.local_batch(0).chunk(2)
        with model.no_sync():
            model(micro[0]).square().mean().backward()
        model(micro[1]).square().mean().backward()
        optimizer.step()
        reference = small_model()
        reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
        for part in range(2):
            for rank in range(self.world_size):
                inputs = batch(0, self.world_size).chunk(self.world_size)[rank].chunk(2)[part]
                (reference(inputs).square().mean() / self.world_size).backward()
        reference_optimizer.step()
        self.assert_parameters_equal(model.module.parameters(), reference.parameters())

    def test_fsdp2(self):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        expected = self.reference(optimizer=torch.optim.Adam)
        mesh = init_device_mesh(DEVICE, (self.world_size,))
        model = small_model().to(self.device)
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        train(model, torch.optim.Adam(model.parameters(), lr=0.1), self.local_batch)
        self.assert_parameters_equal([p.full_tensor() for p in model.parameters()], expected)

    def test_dtensor(self):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor

        mesh = init_device_mesh(DEVICE, (self.world_size,))
        self.assertEqual(mesh.device_type, DEVICE)
        torch.manual_seed(0)
        a, b = torch.randn(6, 4), torch.randn(4, 5)
        sharded = distribute_tensor(a.to(self.device), mesh, [Shard(0)])
        self.assertEqual(sharded.to_local().device, self.device)
        product = sharded @ distribute_tensor(b.to(self.device), mesh, [Replicate()])
        torch.testing.assert_close(product.full_tensor().cpu(), a @ b)
        column_sharded = sharded.redistribute(mesh, [Shard(1)])
        torch.testing.assert_close(column_sharded.full_tensor().cpu(), a)
        torch.testing.assert_close(sharded.sum().full_tensor().cpu(), a.sum())

    def test_zero_redundancy_optimizer(self):
        from torch.distributed.optim import ZeroRedundancyOptimizer
        from torch.nn.parallel import DistributedDataParallel as DDP

        expected = self.reference(optimizer=torch.optim.Adam)
        model = DDP(small_model().to(self.device))
        optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.1)
        train(model, optimizer, self.local_batch)
        self.assert_parameters_equal(model.module.parameters(), expected)


# One class per world size: the test processes are spawned once per class.
class TestTwoRanks(CollectiveTests, TrainingTests, VdevGroupTest):
    world_size = 2


class TestThreeRanks(CollectiveTests, TrainingTests, VdevGroupTest):
    world_size = 3


class FreshProcessesTest(MultiProcessTestCase):
    """Fresh processes for each test: process group setups and faults."""

    @property
    def world_size(self) -> int:
        return 2

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    @property
    def device(self) -> torch.device:
        return device_of_rank(self.rank)

    def init(self, backend=None, timeout=60, **kwargs):
        torch.vdev.set_device(self.device)
        dist.init_process_group(
            backend, rank=self.rank, world_size=self.world_size,
            store=dist.FileStore(self.file_name, self.world_size),
            timeout=datetime.timedelta(seconds=timeout), **kwargs)

    def summed(self) -> torch.Tensor:
        tensor = torch.full((3,), float(self.rank + 1), device=self.device)
        dist.all_reduce(tensor)
        return tensor


class TestSetup(FreshProcessesTest):
    def test_selection_and_recreation(self):
        """Each way of selecting vccl, one process group after the other in the same
        processes (destroyed and created again)."""
        # As with NCCL, a group for the device only has no CPU backend.
        no_cpu_backend = "No backend type associated with device type cpu"
        setups = [
            (dict(device_id=self.device), VCCL, no_cpu_backend),  # the device picks vccl
            (dict(), "undefined", no_cpu_backend),  # vdev is the accelerator
            (dict(backend=f"cpu:gloo,{DEVICE}:{VCCL}"), f"cpu:gloo,{DEVICE}:{VCCL}", None),
            (dict(backend=VCCL), VCCL, no_cpu_backend),
        ]
        self.assertEqual(torch.accelerator.current_accelerator().type, DEVICE)
        for round_, (options, backend_name, cpu_error) in enumerate(setups):
            # A FileStore's file is removed once every rank closed it: one per group.
            self.file_name = f"{self.file_name}.{round_}"
            self.init(**options)
            self.assertEqual(dist.get_backend(), backend_name)
            self.assertEqual(dist.group.WORLD._get_backend(self.device).name(), VCCL)
            torch.testing.assert_close(self.summed().cpu(), torch.full((3,), 3.0))
            cpu = torch.full((2,), float(self.rank))
            if cpu_error is None:
                dist.all_reduce(cpu)
                torch.testing.assert_close(cpu, torch.full((2,), 1.0))
            else:
                with self.assertRaisesRegex(RuntimeError, cpu_error):
                    dist.all_reduce(cpu)
            dist.destroy_process_group()


class TestFallbacks(FreshProcessesTest):
    def test_calls_compared_over_gloo(self):
        """Ranks that cannot share memory (on different hosts; here
        VDEV_VCCL_SHARED_MEMORY=0) compare their calls with an all_gather over gloo:
        mismatches still raise on every rank, and the group stays usable."""
        os.environ["VDEV_VCCL_SHARED_MEMORY"] = "0"
        self.init(VCCL)
        self.assertFalse(torch_vdev._C.compares_calls_in_shared_memory(dist.group.WORLD._get_backend(self.device)))
        work = dist.all_reduce(torch.ones(2 + self.rank, device=self.device), async_op=True)
        work.get_future().wait()
        with self.assertRaisesRegex(RuntimeError, rf"Work.wait: {VCCL} all_reduce: the ranks' calls do not match \(their sizes differ\)"):
            torch.vdev.current_stream().synchronize()
        self.assertFalse(work.is_success())
        torch.testing.assert_close(self.summed().cpu(), torch.full((3,), 3.0))


class TestFaults(FreshProcessesTest):
    """A failing peer is an error within the group's timeout, never a hang."""

    def test_peer_exits(self):
        self.init(VCCL, timeout=20)
        self.summed()
        if self.rank == 1:
            dist.destroy_process_group()
            return
        start = time.monotonic()
        with self.assertRaisesRegex(RuntimeError, "rank 1 left the process group"):
            self.summed().cpu()
        self.assertLess(time.monotonic() - start, 20)

    def test_peer_process_exits(self):
        """A peer whose process ends without leaving the group, while the other waits for
        its call: an error naming it within a moment, not the group's timeout."""
        self.init(VCCL, timeout=60)
        self.summed().cpu()  # done on both ranks before rank 1 exits
        if self.rank == 1:
            os._exit(0)
        start = time.monotonic()
        with self.assertRaisesRegex(RuntimeError, r"rank 1 \(process \d+\) exited before making this call"):
            self.summed().cpu()
        self.assertLess(time.monotonic() - start, 30)

    def test_collective_fails_after_wait(self):
        """A collective that fails after Work.wait() returned (the peer dies while its
        stream is still busy) raises at the next synchronization, naming the collective;
        the device stays usable."""
        self.init(VCCL, timeout=20)
        self.summed().cpu()
        tensor = torch.ones(3, device=self.device)
        if self.rank == 1:
            threading.Timer(2.0, os._exit, args=(0,)).start()
            torch.vdev._sleep(10_000)
            dist.all_reduce(tensor)  # the process exits while this waits for its stream
        work = dist.all_reduce(tensor, async_op=True)
        work.wait()
        with self.assertRaisesRegex(RuntimeError, f"Work.wait: {VCCL} all_reduce failed: .*(Connection|closed|reset)"):
            tensor.cpu()
        torch.testing.assert_close(torch.ones(2, device=self.device).sum().cpu(), torch.tensor(2.0))

    def test_peer_hangs(self):
        self.init(VCCL)  # connecting takes longer than 3 s on a loaded machine
        self.summed()
        dist.group.WORLD._get_backend(self.device).set_timeout(datetime.timedelta(seconds=3))
        if self.rank == 1:
            time.sleep(6)
            return
        start = time.monotonic()
        with self.assertRaisesRegex(RuntimeError, "[Tt]imed out"):
            self.summed().cpu()
        self.assertLess(time.monotonic() - start, 6)


# A rank that finished may still abort at exit, in gloo on CPU tensors too (seen in ~1
# of 6 CPU runs of the example on a loaded machine): DDP keeps the process group alive
# after destroy_process_group, so gloo's worker threads outlive the interpreter, and a
# worker that drops its last all_reduce of a backward late destroys the work's
# ThreadLocalState, whose Python object (the context autograd stashes for backward)
# needs the GIL of an interpreter that is shutting down: std::terminate.
EXIT_ABORT = "terminate called without an active exception"


def test_torchrun_example_trains_as_on_cpu():
    """`torchrun --nproc-per-node 2 examples/train_ddp.py` on vdev (vccl) and on CPU
    (gloo) print the same losses; rank 0 shows tqdm's bar."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "train_ddp.py")

    def run(*args):
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                   script, "--steps", "4", *args]
        for _ in range(3):  # PyTorch's race at exit (EXIT_ABORT), after training: again
            process = subprocess.run(command, capture_output=True, text=True, timeout=300)
            if not (process.returncode != 0 and "final loss" in process.stdout and EXIT_ABORT in process.stderr):
                break
        assert process.returncode == 0, process.stdout + process.stderr
        return process

    on_vdev, on_cpu = run(), run("--device", "cpu")
    assert f"backend {VCCL}" in on_vdev.stdout
    assert "4/4 [" in on_vdev.stderr
    # "final loss L  (first F, mean over ranks, T s)": the losses, not the time.
    final = [[line.split(", mean")[0] for line in p.stdout.splitlines() if line.startswith("final loss")]
             for p in (on_vdev, on_cpu)]
    assert len(final[0]) == 1 and final[0] == final[1]


if __name__ == "__main__":
    run_tests()
