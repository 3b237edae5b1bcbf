"""Tests of oomdoctor.torch, the Trainer/Lightning callbacks and the start-up switch.

Run with ``bash scripts/check-python.sh`` (or ``PYTHONPATH=python python -m unittest discover
-s python/tests``). They need a real ``torch`` (any build: the CPU-only machine this was
written on used the plain ``torch`` wheel from PyPI, without a GPU). The CUDA device and
PyTorch's private memory APIs are replaced by recording fakes, since without a GPU the real
ones raise "Found no NVIDIA driver": the tests cover what the hook does with each API
present, missing, or of the 2.0 form, and what happens when the real ones fail.
``OOMDOCTOR_BIN`` (set by the script) lets the end-to-end test run the binary on the dump.
"""

import contextlib
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON_SRC = os.path.join(ROOT, "python")
FIXTURE = os.path.join(ROOT, "fixtures", "snapshots", "fragmentation_oom.pickle")
if PYTHON_SRC not in sys.path:
    sys.path.insert(0, PYTHON_SRC)

import torch  # noqa: E402

import oomdoctor.torch as hook  # noqa: E402

GIB = 1 << 30


class FakeCuda(object):
    """Replaces the CUDA device queries and private memory APIs on the real torch module.

    legacy: ``_record_memory_history`` takes only the 2.0 arguments and there is no
    ``_dump_snapshot``. observer: whether ``_cuda_attach_out_of_memory_observer`` exists.
    record: whether ``_record_memory_history`` exists.
    """

    def __init__(self, legacy=False, observer=True, record=True):
        self.legacy, self.observer, self.record = legacy, observer, record
        self.calls = []
        self.observers = []
        self.saved = []

    def _set(self, owner, name, value):
        missing = object()
        self.saved.append((owner, name, getattr(owner, name, missing), missing))
        if value is None:
            if hasattr(owner, name):
                delattr(owner, name)
        else:
            setattr(owner, name, value)

    def __enter__(self):
        fake = self

        def record_memory_history(*args, **kwargs):
            if fake.legacy and (kwargs.keys() - {"trace_alloc_max_entries", "trace_alloc_record_context", "device"}):
                raise TypeError("_record_memory_history() got an unexpected keyword argument")
            fake.calls.append(("record", args, kwargs))

        def dump_snapshot(path):
            fake.calls.append(("dump", path))
            shutil.copyfile(FIXTURE, path)

        def snapshot():
            fake.calls.append(("snapshot",))
            with open(FIXTURE, "rb") as f:
                return pickle.load(f)

        def attach(cb):
            fake.observers.append(cb)

        props = types.SimpleNamespace(name="NVIDIA A10G", total_memory=23836033024)
        self._set(torch.cuda, "is_available", lambda: True)
        self._set(torch.cuda, "current_device", lambda: 0)
        self._set(torch.cuda, "get_device_properties", lambda d=None: props)
        self._set(torch.cuda, "get_device_name", lambda d=None: props.name)
        self._set(torch.cuda.memory, "_record_memory_history", record_memory_history if self.record else None)
        self._set(torch.cuda.memory, "_dump_snapshot", None if self.legacy else dump_snapshot)
        self._set(torch.cuda.memory, "_snapshot", snapshot)
        self._set(torch._C, "_cuda_attach_out_of_memory_observer", attach if self.observer else None)
        return self

    def __exit__(self, *exc):
        for owner, name, value, missing in reversed(self.saved):
            if value is missing:
                if hasattr(owner, name):
                    delattr(owner, name)
            else:
                setattr(owner, name, value)


class HookTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="oomdoctor-hook-")
        # Each test starts from a process that never attached an observer.
        hook._observer_attached = False
        hook.unwatch()
        del hook._to_diagnose[:]
        self.stderr = io.StringIO()
        self._redirect = contextlib.redirect_stderr(self.stderr)
        self._redirect.__enter__()

    def tearDown(self):
        hook.unwatch()
        del hook._to_diagnose[:]
        self._redirect.__exit__(None, None, None)
        shutil.rmtree(self.dir, ignore_errors=True)

    def model(self):
        return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))

    def dumps(self):
        return sorted(f for f in os.listdir(self.dir) if f.endswith(".pickle"))

    def sidecar(self, name):
        with open(os.path.join(self.dir, name + ".json")) as f:
            return json.load(f)

    # --- off ------------------------------------------------------------------------------

    def test_import_costs_nothing_when_off(self):
        env = dict(os.environ, PYTHONPATH=PYTHON_SRC)
        env.pop("OOMDOCTOR_WATCH", None)
        out = subprocess.check_output(
            [sys.executable, "-c", "import sys, oomdoctor.torch; print('torch' in sys.modules, sys.excepthook is sys.__excepthook__)"],
            env=env,
        )
        self.assertEqual(out.decode().split(), ["False", "True"])

    def test_real_cpu_torch_fails_soft(self):
        # The machine's own torch, no fakes: no GPU, so nothing to watch, and no exception.
        self.assertFalse(hook.watch(self.model(), out_dir=self.dir))
        self.assertIn("CUDA is not available", self.stderr.getvalue())
        self.assertFalse(hook.is_watching())

    def test_real_apis_raising_without_a_driver_fail_soft(self):
        # CUDA claims to be there but the real private APIs raise (no NVIDIA driver here).
        saved = torch.cuda.is_available
        torch.cuda.is_available = lambda: True
        try:
            self.assertTrue(hook.watch(out_dir=self.dir))
        finally:
            torch.cuda.is_available = saved
        err = self.stderr.getvalue()
        if torch.cuda.device_count() == 0:
            self.assertIn("could not turn on allocation history", err)
            self.assertIn("catching the exception instead", err)
            self.assertEqual(hook._state.mode, "exception")

    # --- the observer (2.0+) ----------------------------------------------------------------

    def test_observer_dumps_snapshot_and_sidecar(self):
        with FakeCuda() as fake:
            m = self.model().to(torch.bfloat16)
            self.assertTrue(hook.watch(m, batch_shape=(8, 64), out_dir=self.dir, diagnose=False, max_entries=5000))
            rec = [c for c in fake.calls if c[0] == "record"]
            self.assertEqual(rec[0][2], {"enabled": "all", "context": "all", "stacks": "python", "max_entries": 5000})
            self.assertEqual(len(fake.observers), 1)
            hook.register(step=41)
            fake.observers[0](0, 2 * GIB, 20 * GIB, 1 * GIB)  # what the allocator calls
            hook.unwatch()
            self.assertEqual([c for c in fake.calls if c[0] == "record"][-1][2], {"enabled": None})
        [name] = self.dumps()
        self.assertRegex(name, r"^oom-\d{8}-\d{6}\.pickle$")
        s = self.sidecar(name)
        self.assertEqual(s["oomdoctor_sidecar"], 1)
        self.assertEqual(s["hook"], "watch")
        self.assertEqual(s["snapshot"], name)
        self.assertEqual(s["torch_version"], torch.__version__)
        self.assertEqual(s["device"], {"index": 0, "name": "NVIDIA A10G", "total_memory_bytes": 23836033024})
        params = sum(p.numel() for p in m.parameters())
        self.assertEqual(s["model"]["params"], params)
        self.assertEqual(s["model"]["dtype"], "torch.bfloat16")
        self.assertEqual(s["model"]["param_bytes"], params * 2)
        self.assertEqual(s["model"]["class"], "Sequential")
        self.assertEqual(s["batch"], {"shape": [8, 64]})
        self.assertEqual(s["step"], 41)
        self.assertEqual(s["max_entries"], 5000)
        self.assertEqual(s["capture"], "observer")
        self.assertEqual(s["oom"]["requested_bytes"], 2 * GIB)
        self.assertIn("oomdoctor " + os.path.join(self.dir, name), self.stderr.getvalue())

    def test_observer_is_inert_after_unwatch_and_dumps_are_bounded(self):
        with FakeCuda() as fake:
            hook.watch(out_dir=self.dir, diagnose=False)
            cb = fake.observers[0]
            cb(0, 1, 2, 3)
            cb(0, 1, 2, 3)  # max_dumps=1: a retry loop does not fill the disk
            self.assertEqual(len(self.dumps()), 1)
            hook.unwatch()
            hook.watch(out_dir=self.dir, diagnose=False, max_dumps=5)
            self.assertEqual(len(fake.observers), 1, "attached once per process")
            hook.unwatch()
            cb(0, 1, 2, 3)
        self.assertEqual(len(self.dumps()), 1)

    def test_alloc_conf_and_rank_in_sidecar(self):
        env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "RANK": "3"}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            with FakeCuda() as fake:
                hook.watch(out_dir=self.dir, diagnose=False)
                fake.observers[0](0, 1, 2, 3)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        [name] = self.dumps()
        self.assertIn("-rank3", name)
        s = self.sidecar(name)
        self.assertEqual(s["alloc_conf"], "expandable_segments:True")
        self.assertEqual(s["ranks"], {"rank": 3})

    # --- 2.0 and missing APIs ---------------------------------------------------------------

    def test_torch_2_0_legacy_record_and_no_dump_snapshot(self):
        with FakeCuda(legacy=True) as fake:
            hook.watch(out_dir=self.dir, diagnose=False, max_entries=777)
            rec = [c for c in fake.calls if c[0] == "record"]
            self.assertEqual(rec[-1][1], (True,))
            self.assertEqual(rec[-1][2], {"trace_alloc_max_entries": 777, "trace_alloc_record_context": True})
            fake.observers[0](0, 1, 2, 3)
            self.assertIn(("snapshot",), fake.calls)
            hook.unwatch()
            self.assertEqual([c for c in fake.calls if c[0] == "record"][-1][1], (False,))
        [name] = self.dumps()
        with open(os.path.join(self.dir, name), "rb") as f, open(FIXTURE, "rb") as g:
            self.assertEqual(pickle.load(f), pickle.load(g))

    def test_no_observer_falls_back_to_the_exception(self):
        with FakeCuda(observer=False):
            with self.assertRaises(torch.OutOfMemoryError):
                with hook.watching(self.model(), out_dir=self.dir, diagnose=False):
                    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            self.assertFalse(hook.is_watching(), "the block ended the watch it started")
        self.assertIn("has no out-of-memory observer", self.stderr.getvalue())
        [name] = self.dumps()
        s = self.sidecar(name)
        self.assertEqual(s["capture"], "exception")
        self.assertTrue(s["oom"]["message"].startswith("CUDA out of memory"))

    def test_other_exceptions_are_not_dumped(self):
        with FakeCuda(observer=False):
            with self.assertRaises(ValueError):
                with hook.watching(out_dir=self.dir, diagnose=False):
                    raise ValueError("not memory")
        self.assertEqual(self.dumps(), [])

    def test_uncaught_oom_goes_through_the_excepthook(self):
        with FakeCuda(observer=False):
            hook.watch(out_dir=self.dir, diagnose=False)
            self.assertIs(sys.excepthook, hook._excepthook)
            err = torch.OutOfMemoryError("CUDA out of memory.")
            saved = hook._previous_excepthook
            hook._previous_excepthook = lambda *a: None  # do not print a traceback here
            try:
                sys.excepthook(type(err), err, None)
            finally:
                hook._previous_excepthook = saved
            hook.unwatch()
            self.assertIsNot(sys.excepthook, hook._excepthook)
        self.assertEqual(len(self.dumps()), 1)

    def test_missing_record_api_still_watches(self):
        with FakeCuda(record=False) as fake:
            self.assertTrue(hook.watch(out_dir=self.dir, diagnose=False))
            self.assertIn("_record_memory_history is missing", self.stderr.getvalue())
            fake.observers[0](0, 1, 2, 3)
        s = self.sidecar(self.dumps()[0])
        self.assertIsNone(s["max_entries"])

    # --- the binary reads what the hook wrote ------------------------------------------------

    def test_oomdoctor_diagnoses_the_dump_with_its_sidecar(self):
        exe = os.environ.get("OOMDOCTOR_BIN")
        if not exe:
            self.skipTest("OOMDOCTOR_BIN not set (scripts/check-python.sh sets it)")
        with FakeCuda() as fake:
            hook.watch(self.model(), batch_shape=(8, 64), out_dir=self.dir, diagnose=False)
            fake.observers[0](0, 12 << 20, 20 * GIB, 1 * GIB)
        [name] = self.dumps()
        out = subprocess.run([exe, os.path.join(self.dir, name), "--format", "json"], stdout=subprocess.PIPE)
        self.assertEqual(out.returncode, 1)
        d = json.loads(out.stdout.decode())
        facts = d["incidents"][0]["facts"]
        self.assertEqual(facts["runtime.device_name"]["value"], "NVIDIA A10G")
        self.assertEqual(facts["oom.total_bytes"]["value"], 23836033024)
        self.assertEqual(facts["torch.version"]["value"], torch.__version__)
        self.assertEqual(facts["train.batch_size"]["value"], 8)
        self.assertEqual(facts["model.params"]["value"], sum(p.numel() for p in self.model().parameters()))
        if os.environ.get("OOMDOCTOR_KEEP_DUMP"):
            dest = os.environ["OOMDOCTOR_KEEP_DUMP"]
            shutil.copyfile(os.path.join(self.dir, name + ".json"), dest)

    def test_exit_time_diagnosis_runs_the_binary(self):
        exe = os.environ.get("OOMDOCTOR_BIN")
        if not exe:
            self.skipTest("OOMDOCTOR_BIN not set")
        with FakeCuda() as fake:
            hook.watch(out_dir=self.dir)  # diagnose=True
            fake.observers[0](0, 12 << 20, 20 * GIB, 1 * GIB)
        r, w = os.pipe()
        saved_err = os.dup(2)
        os.dup2(w, 2)
        try:
            hook._at_exit()
        finally:
            os.dup2(saved_err, 2)
            os.close(w)
        text = os.read(r, 1 << 20).decode()
        os.close(r)
        self.assertIn("fragmentation", text)


class StartupTest(unittest.TestCase):
    """OOMDOCTOR_WATCH=1: the start-up hook waits for torch, then watches."""

    def run_py(self, code, watch):
        env = dict(os.environ, PYTHONPATH=PYTHON_SRC)
        env.pop("OOMDOCTOR_WATCH", None)
        if watch:
            env["OOMDOCTOR_WATCH"] = "1"
        return subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def test_env_switch_waits_for_torch(self):
        code = (
            "import sys, oomdoctor._startup as s; s.install()\n"
            "print('before', 'oomdoctor.torch' in sys.modules)\n"
            "import torch\n"
            "print('after', 'oomdoctor.torch' in sys.modules)\n"
        )
        p = self.run_py(code, watch=True)
        self.assertEqual(p.stdout.decode().split(), ["before", "False", "after", "True"], p.stderr.decode())
        # Without a GPU, watch() says why it is not watching: proof it ran.
        self.assertIn("CUDA is not available", p.stderr.decode())
        p = self.run_py(code, watch=False)
        self.assertEqual(p.stdout.decode().split(), ["before", "False", "after", "False"])

    def test_module_runner_watches_a_script(self):
        script = os.path.join(tempfile.mkdtemp(prefix="oomdoctor-run-"), "train.py")
        with open(script, "w") as f:
            f.write("import sys\nprint('ran', sys.argv[1:], 'oomdoctor.torch' in sys.modules)\n")
        env = dict(os.environ, PYTHONPATH=PYTHON_SRC)
        p = subprocess.run([sys.executable, "-m", "oomdoctor.torch", script, "--lr", "1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertIn("ran ['--lr', '1'] True", p.stdout.decode())
        self.assertIn("CUDA is not available", p.stderr.decode())


class CallbackTest(unittest.TestCase):
    """The callbacks, against stand-ins for transformers and lightning (neither is installed)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="oomdoctor-cb-")
        hook._observer_attached = False
        hook.unwatch()
        self.saved_modules = dict(sys.modules)
        self._redirect = contextlib.redirect_stderr(io.StringIO())
        self._redirect.__enter__()

    def tearDown(self):
        hook.unwatch()
        for k in list(sys.modules):
            if k not in self.saved_modules:
                del sys.modules[k]
        sys.modules.update(self.saved_modules)
        self._redirect.__exit__(None, None, None)
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_hf_needs_transformers(self):
        sys.modules.pop("oomdoctor.hf", None)
        sys.modules["transformers"] = None  # "not installed"
        with self.assertRaises(ImportError) as e:
            import oomdoctor.hf  # noqa: F401
        self.assertIn("pip install transformers", str(e.exception))

    def test_hf_trainer_callback(self):
        sys.modules.pop("oomdoctor.hf", None)
        stub = types.ModuleType("transformers")
        stub.TrainerCallback = type("TrainerCallback", (object,), {})
        sys.modules["transformers"] = stub
        from oomdoctor.hf import OOMDoctorCallback

        model = torch.nn.Linear(4, 4)
        args = types.SimpleNamespace(per_device_train_batch_size=16, output_dir=self.dir)
        state = types.SimpleNamespace(global_step=0)
        cb = OOMDoctorCallback(seq_len=512, diagnose=False)
        with FakeCuda() as fake:
            cb.on_train_begin(args, state, None, model=model)
            self.assertTrue(hook.is_watching())
            state.global_step = 7
            cb.on_step_end(args, state, None)
            fake.observers[0](0, 1, 2, 3)
            cb.on_train_end(args, state, None)
            self.assertFalse(hook.is_watching())
        [name] = [f for f in os.listdir(self.dir) if f.endswith(".pickle")]
        with open(os.path.join(self.dir, name + ".json")) as f:
            s = json.load(f)
        self.assertEqual(s["hook"], "hf-trainer")
        self.assertEqual(s["batch"], {"shape": [16, 512], "seq_len": 512})
        self.assertEqual(s["step"], 7)
        self.assertEqual(s["model"]["params"], 20)

    def test_lightning_callback(self):
        sys.modules.pop("oomdoctor.lightning", None)
        for name in ("lightning", "lightning.pytorch", "lightning.pytorch.callbacks"):
            sys.modules[name] = types.ModuleType(name)
        sys.modules["lightning.pytorch.callbacks"].Callback = type("Callback", (object,), {})
        from oomdoctor.lightning import OOMDoctorCallback

        module = torch.nn.Linear(4, 2)
        trainer = types.SimpleNamespace(default_root_dir=self.dir, global_step=0)
        cb = OOMDoctorCallback(diagnose=False)
        with FakeCuda(observer=False):
            cb.setup(trainer, module, "fit")
            trainer.global_step = 3
            cb.on_train_batch_start(trainer, module, {"input_ids": torch.zeros(4, 128)}, 0)
            cb.on_exception(trainer, module, torch.OutOfMemoryError("CUDA out of memory."))
            cb.teardown(trainer, module, "fit")
            self.assertFalse(hook.is_watching())
        [name] = [f for f in os.listdir(self.dir) if f.endswith(".pickle")]
        with open(os.path.join(self.dir, name + ".json")) as f:
            s = json.load(f)
        self.assertEqual(s["hook"], "lightning")
        self.assertEqual(s["batch"], {"shape": [4, 128]})
        self.assertEqual(s["step"], 3)
        self.assertEqual(s["capture"], "exception")


if __name__ == "__main__":
    unittest.main()
