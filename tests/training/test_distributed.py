"""Data-parallel DP under torchrun: the sharded sampler is one Poisson sample; a 2-process gloo run
equals the 1-process run step for step (every method); a dead rank ends the job with a clear error."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from raptor.mechanisms import AesCtrGenerator, poisson_sample, seeded_generator
from raptor.training.run.distributed import Communicator, DistConfig, SingleProcess, init_communicator
from raptor.training.step.release import GroupRelease

HERE = Path(__file__).parent
SRC = HERE.parents[1] / "src"
WORKER = HERE / "dist_worker.py"
# 2 processes vs 1, per trainable weight after each of 3 steps that move the weights by ~0.19:
# float32 runs differ by summation order only (measured max 1.2e-7); a bf16 run's float32 masters
# by bf16 rounding of activations computed in other micro-batches (measured 6e-6, 1.4e-5, 2.1e-4)
TOL = {False: 2e-6, True: 1e-3}


class _FakeRank(Communicator):
    def __init__(self, rank, world):
        self.rank, self.world_size = rank, world


def test_union_of_shards_is_the_single_process_sample():
    for world in (1, 2, 3, 5):
        for seed in range(5):
            parts = [_FakeRank(r, world).sample(101, 0.3, seeded_generator(seed)) for r in range(world)]
            union = torch.sort(torch.cat(parts)).values
            assert torch.equal(union, poisson_sample(101, 0.3, seeded_generator(seed)))
            # the shards are disjoint: rank r only keeps i = r mod W
            for r, part in enumerate(parts):
                assert bool((part % world == r).all())


def test_union_size_is_binomial_and_membership_independent():
    # 4 ranks, N = 40, q = 0.25, 4000 steps from one generator: |union| ~ Binomial(40, 0.25)
    # (mean 10, var 7.5), P(i in S) = q, and P(i, j in S) = q^2 for i, j on different ranks and
    # on the same rank (independence); tolerances are ~5 standard errors.
    N, q, W, steps = 40, 0.25, 4, 4000
    gen = seeded_generator(123)
    member = torch.zeros(steps, N, dtype=torch.bool)
    ranks = [_FakeRank(r, W) for r in range(W)]
    for t in range(steps):
        state = gen.get_state()
        for r in ranks:
            gen.set_state(state)  # every rank's sampler is in the same state
            member[t, r.sample(N, q, gen)] = True
    sizes = member.sum(1).double()
    assert abs(sizes.mean().item() - N * q) < 5 * (N * q * (1 - q) / steps) ** 0.5
    assert abs(sizes.var().item() - N * q * (1 - q)) < 0.6
    freq = member.double().mean(0)
    assert (freq - q).abs().max() < 5 * (q * (1 - q) / steps) ** 0.5
    joint = (member.double().T @ member.double()) / steps
    off = joint[~torch.eye(N, dtype=torch.bool)]
    assert (off - q * q).abs().max() < 6 * (q * q * (1 - q * q) / steps) ** 0.5
    same_rank, other_rank = joint[0, 4], joint[0, 1]  # 0 and 4 share rank 0 of 4
    assert abs(same_rank - q * q) < 0.03 and abs(other_rank - q * q) < 0.03


def test_aes_sampler_shared_by_the_ranks_gives_the_single_process_sample():
    # secure mode: every rank starts its sampler at rank 0's AES state, so the shards of the AES
    # stream's uniforms partition the one Poisson sample the same stream gives one process
    state = AesCtrGenerator().get_state()

    def shared():
        gen = AesCtrGenerator()
        gen.set_state(state)
        return gen

    parts = [_FakeRank(r, 3).sample(257, 0.2, shared()) for r in range(3)]
    union = torch.sort(torch.cat(parts)).values
    assert torch.equal(union, poisson_sample(257, 0.2, shared()))
    assert not torch.equal(union, poisson_sample(257, 0.2, AesCtrGenerator()))  # a fresh key: another sample


def test_single_process_communicator_is_the_identity():
    comm = init_communicator(None, "cpu")
    assert isinstance(comm, SingleProcess) and comm.world_size == 1 and comm.is_main
    g = {"a": torch.randn(3)}
    assert comm.all_reduce_grads(g, 2) == (g, 2)
    groups = (GroupRelease("shared", "shared", 1.0, 1.5, 8.0), GroupRelease("e", "expert", 2.0, 2.0, 4.0))
    assert comm.local_groups(groups) == groups
    other = _FakeRank(1, 2).local_groups(groups)  # noise once: only rank 0 draws
    assert [g.sigma for g in other] == [0.0, 0.0]
    assert [(g.clip_norm, g.denominator) for g in other] == [(1.0, 8.0), (2.0, 4.0)]
    assert comm.shard_range(10) == (0, 10)
    assert [_FakeRank(r, 3).shard_range(10) for r in range(3)] == [(0, 3), (3, 6), (6, 10)]
    preds = torch.tensor([1, 0])
    assert comm.gather_predictions(preds, 1.5) == (preds, 1.5)
    assert comm.on_main(lambda: 7) == 7


def test_single_process_generators_are_the_specs():
    from raptor.mechanisms import GeneratorSpec

    seeded = SingleProcess().generators(GeneratorSpec(secure=False, seed=3), "cpu")
    assert torch.equal(torch.rand(4, generator=seeded["sample"]),
                       torch.rand(4, generator=GeneratorSpec(secure=False, seed=3).mechanism(0)))
    secure = SingleProcess().generators(GeneratorSpec(secure=True), "cpu")
    assert all(isinstance(g, AesCtrGenerator) for g in secure.values())


def test_released_gradients_travel_in_one_bucket_unless_huge():
    from raptor.training.run.distributed import _buckets

    t = {n: torch.zeros(k) for n, k in (("a", 3), ("b", 4), ("c", 10), ("d", 1))}
    assert _buckets(t, 1 << 20) == [["a", "b", "c", "d"]]
    assert _buckets(t, 8) == [["a", "b"], ["c"], ["d"]]  # a tensor larger than a bucket goes alone
    assert _buckets({}, 8) == [[]]


def test_dist_config_errors_name_the_flag():
    with pytest.raises(ValueError, match="run.dist_backend"):
        DistConfig("mpi")
    with pytest.raises(ValueError, match="run.dist_timeout"):
        DistConfig("gloo", 0)
    with pytest.raises(ValueError, match="nccl needs --device cuda"):
        init_communicator(DistConfig("nccl"), "cpu")


def test_without_torchrun_the_error_says_how_to_launch(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match="launch with torchrun"):
        init_communicator(DistConfig("gloo"), "cpu")


def test_train_cli_distributed_without_torchrun_exits_2_naming_torchrun(monkeypatch, tmp_path, capsys):
    from raptor.cli.main import main

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert main(["train", "--model", "switch_transformers", "--set", "run.distributed=true", "--steps", "1", "--output-dir", str(tmp_path)]) == 2
    assert "torchrun" in capsys.readouterr().err
    assert main(["train", "--model", "switch_transformers", "--set", "run.distributed=true", "--set", "run.dist_backend=nccl", "--output-dir", str(tmp_path)]) == 2
    assert "--device cuda" in capsys.readouterr().err
    assert main(["train", "--model", "switch_transformers", "--set", "run.distributed=true", "--objective", "generate", "--output-dir", str(tmp_path)]) == 2
    assert "--set run.distributed=true supports --objective classify only" in capsys.readouterr().err


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc`` and, when it leads its own process group (``start_new_session``), its children."""
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except ProcessLookupError:
        pass  # already gone


def _finish(proc: subprocess.Popen, timeout: float, what: str) -> str:
    """``proc``'s output once it ends; past ``timeout`` s it is killed and the test fails saying so
    (``communicate(timeout=)`` alone raises but leaves the process running)."""
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out = proc.communicate(timeout=60)[0]
        pytest.fail(f"{what} did not end within {timeout:.0f} s (hung?); killed it. Output:\n{out[-3000:]}")


@pytest.mark.distributed
def test_two_process_gloo_run_matches_one_process_step_for_step(tmp_path):
    one, two = tmp_path / "one.pt", tmp_path / "two.pt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(WORKER), str(two), "--distributed", "--save-dir", str(tmp_path / "ckpt"), "--secure-check"]
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own process group: a kill reaches torchrun's workers
    try:
        import dist_worker  # the 1-process run, in this process, while the 2-process run goes on

        dist_worker.main([str(one)])
    except BaseException:
        _kill_group(proc)  # its result is not needed any more
        proc.communicate(timeout=60)
        raise
    out = _finish(proc, 600, "the 2-process torchrun job")
    assert proc.returncode == 0, out[-3000:]
    a, b = torch.load(one), torch.load(two)
    assert set(a) == set(dist_worker.METHODS) and set(b) == set(a) | {"secure"}
    for method in a:
        start = a[method]["params"][0]
        assert (a[method]["params"][-1] - start).abs().max() > 1e-2  # the run moves: the test can fail
        tol = TOL[method.endswith("-bf16")]
        for t, (x, y) in enumerate(zip(a[method]["params"], b[method]["params"], strict=True)):
            torch.testing.assert_close(y, x, rtol=0, atol=tol, msg=f"{method} step {t}")
        assert a[method]["epsilon"] == b[method]["epsilon"]
        da, db = a[method]["dev"], b[method]["dev"]
        assert db["dev_loss"] == pytest.approx(da["dev_loss"], rel=10 * tol)
        assert da["metrics"] == db["metrics"] or method.endswith("-bf16")
        assert a[method]["nonfinite"] == b[method]["nonfinite"] == 0
        # resume with the SAME world size (2 -> 2): the checkpoint after step 2, continued by the
        # 2-process job, gives the uninterrupted run's step 3
        resumed = b[method]["resumed"]
        torch.testing.assert_close(resumed["params"], a[method]["params"][-1], rtol=0, atol=tol)
        assert resumed["epsilon"] == a[method]["epsilon"][-1]
    # resume with a DIFFERENT world size (2 -> 1): same sampler state, same noise, same ledger
    from raptor.accounting.ledger import PrivacyLedger

    for method in ("raptor", "dp-lora", "raptor-bf16"):
        trainer = dist_worker.build(method)
        trainer.resume(tmp_path / "ckpt" / method, PrivacyLedger.from_dict)
        assert trainer.state.step == dist_worker.STEPS - 1
        trainer.step()
        torch.testing.assert_close(dist_worker.flat_params(trainer), a[method]["params"][-1], rtol=0,
                                   atol=TOL[method.endswith("-bf16")])
        assert trainer.epsilon_spent() == a[method]["epsilon"][-1]
    # secure (AES-CTR) randomness across ranks: one shared sampling stream, noise once from rank 0
    sec = b["secure"]
    assert sec["samplers_equal"] and sec["noise_streams_differ"] and sec["replicas_equal"]
    assert sec["replica_moved"] > 1e-3
    assert abs(sec["local_std_rank0"] - 1.0) < 0.03 and abs(sec["released_std"] - 1.0) < 0.03  # not sqrt(2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.distributed
def test_a_dead_rank_ends_the_job_with_a_clear_error():
    # torchrun's env:// protocol, set by hand so that rank 0's own error is visible: rank 1 exits
    # after one all-reduce without a word; rank 0's next all-reduce must raise DistributedError
    # (gloo sees the closed connection at once; the 20 s process-group timeout is the backstop).
    port = _free_port()
    procs = []
    start = time.monotonic()
    for rank in (0, 1):
        env = _env() | {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen([sys.executable, str(HERE / "dead_rank_worker.py"), "20"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        outs = [_finish(p, max(1.0, 120 - (time.monotonic() - start)), f"rank {r}") for r, p in enumerate(procs)]
    finally:
        for p in procs:
            if p.poll() is None:  # a rank left running by a failure above
                _kill_group(p)
                p.wait(timeout=60)
    assert time.monotonic() - start < 120
    assert procs[1].returncode == 3, outs[1][-2000:]
    assert procs[0].returncode != 0 and "unreachable" not in outs[0]
    assert "DistributedError: rank 0/2: all_reduce of the released gradients failed" in outs[0], outs[0][-2000:]
    assert "run.dist_timeout=20 s" in outs[0]
