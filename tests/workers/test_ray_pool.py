"""The Ray backend of the worker pool, on one local Ray instance (2 CPUs),
with the real compiler: parity with the local pool, shipped bitcode, a killed
actor and straggler cancellation."""

from __future__ import annotations

import os
import threading
import time

import pytest

ray = pytest.importorskip("ray")

from _corpus_helpers import build_generated_corpus  # noqa: E402
from mlgo_host.workers.pool import EarlyExit, WorkerPool, make_pool  # noqa: E402
from mlgo_host import procs  # noqa: E402
from mlgo_host.workers.ray_pool import RayPool  # noqa: E402

pytestmark = pytest.mark.ray

FACTORY = "mlgo_host.workers.worker:CollectWorker"
HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "helpers")
SMALL = {"s0": 12, "s1": 25, "s2": 40, "s3": 18, "s4": 30}  # module name -> number of functions
SLOW = ("slow", 800)


@pytest.fixture(scope="module")
def ray_instance():
    # Actors import test helpers too (the local pool passes sys.path to its
    # spawned children; Ray workers inherit the environment of the raylet).
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = HERE + (os.pathsep + old if old else "")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A corpus built from generated C files with clang-19 (the corpus
    builder: -disable-llvm-passes bitcode + the cc1 command)."""
    from mlgo_host.corpus.corpus import load_corpus

    root = tmp_path_factory.mktemp("ray-corpus")
    build_generated_corpus(root, {**SMALL, SLOW[0]: SLOW[1]})
    c = load_corpus(root / "corpus")
    assert sorted(m.name for m in c.modules) == sorted([*SMALL, SLOW[0]])
    return c


@pytest.fixture(scope="module")
def worker_kwargs(tmp_path_factory):
    return {"baseline_cache": str(tmp_path_factory.mktemp("baselines"))}


def _small_tasks(corpus, ship_bitcode=False):
    mods = sorted((m for m in corpus.modules if m.name in SMALL), key=lambda m: m.name)
    return [(m.to_task(ship_bitcode=ship_bitcode), 1000 + i, False, True) for i, m in enumerate(mods)]


def _sizes(outcomes) -> dict[str, int]:
    assert all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok]
    assert all(o.value["status"] == "ok" for o in outcomes), [o.value["reason"] for o in outcomes]
    return {o.value["name"]: o.value["policy_size"] for o in outcomes}


@pytest.fixture(scope="module")
def local_sizes(corpus, worker_kwargs):
    """Per-module sizes from the local backend (seeded random policy)."""
    with WorkerPool(2, FACTORY, worker_kwargs) as pool:
        pool.broadcast("set_policy", {"heuristic": "random"})
        random_sizes = _sizes(pool.map_unordered("collect", _small_tasks(corpus)))
        pool.broadcast("set_policy", {"heuristic": "default"})
        slow = [m for m in corpus.modules if m.name == SLOW[0]][0]
        default_sizes = _sizes(pool.map_unordered("collect", [(m.to_task(), 0, True, True)
                                                              for m in corpus.modules if m.name in SMALL]
                                                  + [(slow.to_task(), 0, True, True)]))
    return {"random": random_sizes, "default": default_sizes}


@pytest.fixture
def ray_pool(ray_instance):
    """``ray_pool(factory, kwargs)``: a pool of two actors, closed after the test."""
    pools = []

    def make(factory: str, kwargs: dict) -> RayPool:
        # half a CPU per actor: a second pool (make_pool) can start beside it
        pools.append(RayPool(2, factory, kwargs, num_cpus_per_worker=0.5))
        return pools[-1]

    yield make
    for p in pools:
        p.close()


@pytest.mark.parametrize("form", ["127.0.0.1:{port}", "ray://127.0.0.1:{port}", "127.0.0.1"])
def test_an_address_where_nothing_answers_is_one_line_at_once(form):
    """Ray itself retries such an address for minutes, a line per attempt; it is refused before ray.init."""
    import socket

    from mlgo_host.errors import ConfigError
    from mlgo_host.workers.ray_pool import ensure_ray

    if ray.is_initialized():
        pytest.skip("a Ray instance of this process is up: ensure_ray would use it")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    address = form.format(port=port)
    with pytest.raises(ConfigError, match=rf"--ray-address {address}: (nothing answers there|expected HOST:PORT)"):
        ensure_ray(address)
    assert not ray.is_initialized()


def test_an_address_that_answers_but_is_not_ray_is_one_line_without_ray_s_retries(capfd):
    """An HTTP server, not a Ray head: the TCP connection is accepted, the gRPC handshake is not."""
    import http.server
    import threading

    from mlgo_host.errors import ConfigError
    from mlgo_host.workers.ray_pool import ensure_ray

    if ray.is_initialized():
        pytest.skip("a Ray instance of this process is up: ensure_ray would use it")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"127.0.0.1:{server.server_address[1]}"
        with pytest.raises(ConfigError, match=rf"--ray-address {address}: something answers there, but not a Ray "):
            ensure_ray(address)
    finally:
        server.shutdown()
        server.server_close()
    assert not ray.is_initialized()
    assert "retry" not in capfd.readouterr().err.lower()


def test_ray_pool_gives_the_local_pools_sizes(ray_instance, corpus, worker_kwargs, local_sizes):
    sizes_random = local_sizes["random"]
    # the seeded random policy really decides something: not the -Oz sizes
    assert sizes_random != local_sizes["default"]
    with make_pool("ray", 2, FACTORY, worker_kwargs, ray_address=None, num_cpus_per_worker=0.5) as pool:
        assert pool.backend == "ray" and pool.num_workers == 2
        pool.broadcast("set_policy", {"heuristic": "random"})
        seen = []
        out = pool.map_unordered("collect", _small_tasks(corpus), on_result=seen.append)
        assert len(seen) == len(out) == len(SMALL)
        assert _sizes(out) == sizes_random
        assert sorted(o.index for o in out) == list(range(len(SMALL)))
        info = pool.workers_info()
        assert len({i["pid"] for i in info}) == 2 and os.getpid() not in {i["pid"] for i in info}
        assert not any(i["tensorflow"] for i in info)
        assert pool.retries == 0


def test_shipped_bitcode_needs_no_shared_filesystem(ray_pool, corpus, worker_kwargs, local_sizes):
    tasks = []
    for task, seed, greedy, record in _small_tasks(corpus, ship_bitcode=True):
        assert task["bc_bytes"]
        # the path does not exist on the worker: only the shipped bytes can be compiled
        task = dict(task, bc_path=os.path.join(HERE, "no-such-dir", task["name"] + ".bc"))
        tasks.append((task, seed, greedy, record))
    pool = ray_pool(FACTORY, worker_kwargs)
    pool.broadcast("set_policy", {"heuristic": "random"})
    assert _sizes(pool.map_unordered("collect", tasks)) == local_sizes["random"]
    # without the bytes, the missing path is a reported task failure, not a hang
    bad = dict(tasks[0][0])
    del bad["bc_bytes"]
    out = pool.map_unordered("collect", [(bad, 0, False, True)])
    assert not (out[0].ok and out[0].value["status"] == "ok")


def _compiler_children(pid: int) -> list[int]:
    """Session-leader children of an actor process (its compilers)."""
    out = []
    for c in procs.children(pid):
        st = procs.stat(c)
        if st is not None and st.sid == c:
            try:
                with open(f"/proc/{c}/cmdline", "rb") as f:
                    if b"clang" in f.read():
                        out.append(c)
            except OSError:
                pass
    return out


def _gone(pid: int, timeout: float = 20.0) -> bool:
    """True once ``pid`` has exited (absent or a zombie)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not procs.alive(pid):
            return True
        time.sleep(0.05)
    return False


def _slow_tasks(corpus):
    slow = [m for m in corpus.modules if m.name == SLOW[0]][0]
    return [(slow.to_task(), 0, True, True)] + [(t, 0, True, True) for t, *_ in _small_tasks(corpus)]


def test_a_killed_actor_mid_module_is_retried_once_and_replaced(ray_pool, corpus, worker_kwargs, local_sizes):
    pool = ray_pool(FACTORY, worker_kwargs)
    pool.broadcast("set_policy", {"heuristic": "default"})
    slots = pool.workers_info()  # in slot order
    killed: dict = {}

    def killer():
        # kill the actor that runs the slow module's channel compile, mid-module
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for slot, actor in enumerate(pool.cluster.actors):
                for c in _compiler_children(slots[slot]["pid"]):
                    try:
                        with open(f"/proc/{c}/cmdline", "rb") as f:
                            cmd = f.read()
                    except OSError:
                        continue
                    if b"slow.bc" in cmd and b"interactive-channel-base" in cmd:
                        killed.update(pid=slots[slot]["pid"], compiler=c, tmp=slots[slot]["tmp"])
                        ray.kill(actor)
                        return
            time.sleep(0.01)

    th = threading.Thread(target=killer)
    th.start()
    out = pool.map_unordered("collect", _slow_tasks(corpus))
    th.join()
    assert killed, "the slow module's compile was never seen"
    # every module completed, with the sizes of the local backend; one retry
    assert _sizes(out) == local_sizes["default"]
    assert pool.retries == 1
    # the dead actor was replaced: still two workers, the killed pid is not among them
    info = pool.workers_info()
    assert len(info) == 2 and killed["pid"] not in {i["pid"] for i in info}
    # the orphaned compiler was killed by the actor's watchdog, and its directory removed
    assert _gone(killed["compiler"])
    deadline = time.monotonic() + 20
    while os.path.exists(killed["tmp"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(killed["tmp"])
    # the replacement got the last broadcast (the policy) and serves
    again = pool.map_unordered("collect", [(t, 0, True, True) for t, *_ in _small_tasks(corpus)[:2]])
    assert all(o.ok and o.value["policy_size"] == local_sizes["default"][o.value["name"]] for o in again)


def test_a_task_whose_compiler_is_killed_from_outside_is_retried_and_its_live_actor_kept(ray_pool, tmp_path):
    # Ray kills an actor's compilers just before the actor, so a task can answer first: it answers "lost" and
    # is retried. Here the actor lives on (as after the OOM killer): its ping answers and it is not replaced.
    src = tmp_path / "tiny.c"
    src.write_text("int f(int x) { return x + 1; }\n")
    pool = ray_pool("_toy_worker:ToyWorker", {})
    pids = sorted(i["pid"] for i in pool.workers_info())
    out = pool.map_unordered("compile_killed_once", [(str(src), str(tmp_path / "marker"))])
    assert len(out) == 1 and out[0].ok, out
    assert out[0].value["rc"] == -9  # the second run: killed by its own supervisor, which is not "lost"
    assert pool.retries == 1
    assert sorted(i["pid"] for i in pool.workers_info()) == pids


def test_stragglers_are_cancelled_and_their_compilers_killed(ray_pool, corpus, worker_kwargs):
    # the slow module's policy sleeps at each decision: it is mid-compile when the deadline comes
    pool = ray_pool("_slow_worker:SlowModuleWorker", worker_kwargs)
    pool.broadcast("set_policy", {"heuristic": "default"})
    tasks = _slow_tasks(corpus)[:5]  # the slow module and four small ones
    early = EarlyExit(fraction=0.8, grace_s=0.1, grace_factor=0.05, timeout_s=600)
    out = pool.map_unordered("collect", tasks, early)
    by_index = {o.index: o for o in out}
    assert sorted(by_index) == list(range(5))
    assert by_index[0].cancelled and not by_index[0].ok
    assert all(by_index[i].ok for i in range(1, 5))
    # no compiler left running in any actor, and the actors still serve
    for i in pool.workers_info():
        assert _compiler_children(i["pid"]) == []
    again = pool.map_unordered("collect", tasks[1:3])
    assert all(o.ok for o in again) and pool.retries == 0


@pytest.fixture(scope="module")
def small_corpus_dir(corpus, tmp_path_factory):
    """The small modules only (a short training iteration)."""
    import shutil

    from mlgo_host.corpus.corpus import write_description

    d = tmp_path_factory.mktemp("small-corpus")
    for name in SMALL:
        for ext in (".bc", ".cmd"):
            shutil.copy(os.path.join(corpus.root, name + ext), d / (name + ext))
    write_description(d, list(SMALL))
    return d


def _one_iteration(root, corpus_dir, backend):
    from mlgo_host.training.train_loop import train
    from mlgo_host.training.workers import Workers

    train(str(root), str(corpus_dir), num_iterations=1, modules_per_iteration=4,
          workers=Workers(num_workers=2, worker_backend=backend), eval_every=0, heldout_fraction=0.0, seed=3,
          progress=False, early_exit_fraction=1.0, trace_modules=3)
    import json

    with open(os.path.join(root, "state.json")) as f:
        return json.load(f)


def test_one_training_iteration_on_ray_matches_the_local_backend(ray_instance, small_corpus_dir, tmp_path):
    """The issue's acceptance test: the same seed and policy give the same
    per-module sizes with worker_backend='ray' as with 'local'."""
    local = _one_iteration(tmp_path / "local", small_corpus_dir, "local")
    remote = _one_iteration(tmp_path / "ray", small_corpus_dir, "ray")
    assert local["history"][0]["failures"] == 0 and remote["history"][0]["failures"] == 0
    assert local["history"][0]["ok"] == remote["history"][0]["ok"] == 4
    # after one iteration the moving averages are a function of each module's
    # policy size and -Oz size: equal averages <=> equal per-module sizes
    assert local["moving_average"]["averages"] == remote["moving_average"]["averages"]
    assert len(local["moving_average"]["averages"]) >= 2
    assert local["history"][0]["decisions"] == remote["history"][0]["decisions"] > 0

