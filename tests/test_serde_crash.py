"""The .irb + sidecar pair under kill -9 and concurrent writers (issue 12 items 6 and 7).

Real processes, real SIGKILL: a writer subprocess is killed at every stage of a save (via
serde's IRBRIDGE_TEST_KILL_AT hook) and at random instants; two writers race. After each,
`serde.load` must succeed and return one of the two models whole, and the next save must
clean up what the killed one left (temporaries and unreferenced sidecars)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from irbridge import serde
from irbridge.atomic import KILL_HOOK

STAGES = ["writing.data", "sidecar-written", "writing", "main-written", "sidecar-renamed",
          "main-renamed", "cleaned"]

MODEL_CODE = textwrap.dedent('''
    import numpy as np
    from irbridge.dtypes import DType
    from irbridge.ir import Graph, Model, Tensor, TensorType

    def model_for(seed):
        """Model `seed`: every tensor element derives from the seed, so a mixed pair shows."""
        model = Model(name=f"gen{seed}")
        graph = Graph()
        x = graph.add_input("x", TensorType(DType.FLOAT32, (64, 64)))
        out = x
        for i in range(3):
            w = graph.add_parameter(model.add_tensor(Tensor.from_array(
                f"w{i}", np.full((64, 64), seed * 10 + i, np.float32))))
            out = graph.add_node("add", [out, w], [f"y{i}"],
                                 output_types=[TensorType(DType.FLOAT32, (64, 64))]).outputs[0]
        graph.set_outputs([out])
        model.graphs.append(graph)
        return model
''')

WRITER = MODEL_CODE + textwrap.dedent('''
    import sys
    from irbridge import serde
    path, seeds, rounds = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], int(sys.argv[3])
    models = [model_for(s) for s in seeds]
    print("ready", flush=True)
    for i in range(rounds):
        serde.save(models[i % len(models)], path, weights="external")
''')

namespace: dict[str, object] = {}
exec(MODEL_CODE, namespace)  # the same builder the writer subprocess runs
model_for = namespace["model_for"]


def start_writer(tmp_path: Path, path: Path, seeds: str, rounds: int,
                 kill_at: str | None = None) -> subprocess.Popen[str]:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = dict(os.environ)
    env.pop(KILL_HOOK, None)
    if kill_at:
        env[KILL_HOOK] = kill_at
    return subprocess.Popen([sys.executable, str(script), str(path), seeds, str(rounds)],
                            stdout=subprocess.PIPE, text=True, env=env)


def whole_model(path: Path, seeds: set[int]) -> int:
    """Load `path`; assert it is one of the models `seeds` with every tensor intact."""
    model = serde.load(path)
    seed = int(model.name.removeprefix("gen"))
    assert seed in seeds
    for i in range(3):
        data = model.tensors[f"w{i}"].data
        assert data is not None and (data == seed * 10 + i).all(), f"tensor w{i} of gen{seed}"
    return seed


@pytest.mark.parametrize("stage", STAGES)
def test_kill_at_every_stage_leaves_old_or_new_model_whole(tmp_path: Path, stage: str) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / "m.irb"
    serde.save(model_for(1), path, weights="external")
    writer = start_writer(tmp_path, path, "2", 1, kill_at=stage)
    assert writer.wait(timeout=120) == -signal.SIGKILL
    seed = whole_model(path, {1, 2})
    # Before the main file's rename the old model stays; from it on, the new one.
    assert seed == (2 if STAGES.index(stage) >= STAGES.index("main-renamed") else 1)
    # The next save removes the killed writer's temporaries and unreferenced sidecars.
    serde.save(model_for(3), path, weights="external")
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["m.irb", serde.sidecar_path(path).name], names
    assert whole_model(path, {3}) == 3


def test_kill_at_random_instants(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / "m.irb"
    serde.save(model_for(1), path, weights="external")
    rng = random.Random(12)
    for _ in range(5):
        writer = start_writer(tmp_path, path, "1,2", 10_000)
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.0, 0.3))  # many saves of a few ms each: a random instant
        writer.send_signal(signal.SIGKILL)
        assert writer.wait(timeout=60) == -signal.SIGKILL
        whole_model(path, {1, 2})
    serde.save(model_for(3), path, weights="external")
    assert sorted(p.name for p in folder.iterdir()) == ["m.irb", serde.sidecar_path(path).name]


def test_two_racing_writers_and_a_reader(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / "m.irb"
    serde.save(model_for(1), path, weights="external")
    writers = [start_writer(tmp_path, path, "1", 40), start_writer(tmp_path, path, "2", 40)]
    loads: list[int] = []
    while any(w.poll() is None for w in writers):
        loads.append(whole_model(path, {1, 2}))  # a reader during the race: always whole
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    assert loads
    whole_model(path, {1, 2})
    # No sidecar of a lost race or temporary is left: the file and the sidecar it names.
    assert sorted(p.name for p in folder.iterdir()) == ["m.irb", serde.sidecar_path(path).name]


def test_old_single_sidecar_files_still_load(tmp_path: Path) -> None:
    """Files written before sidecar generations name `<file>.data`; they load, and the next
    save replaces that sidecar with a generation one."""
    path = tmp_path / "m.irbt"
    serde.save(model_for(4), path, weights="external")
    side = serde.sidecar_path(path)
    legacy = tmp_path / "m.irbt.data"
    side.rename(legacy)
    path.write_text(path.read_text().replace(side.name, legacy.name))
    assert whole_model(path, {4}) == 4
    serde.save(model_for(5), path, weights="external")
    assert not legacy.exists() and whole_model(path, {5}) == 5


def test_live_writers_temporaries_are_kept(tmp_path: Path) -> None:
    """Only temporaries of dead writers go: one with this (live) process's pid stays."""
    path = tmp_path / "m.irb"
    from irbridge.atomic import temp_prefix
    mine = tmp_path / f"{temp_prefix(path)}abc123.tmp"
    mine.write_bytes(b"in progress")
    dead = tmp_path / f"{temp_prefix(path).rsplit('-', 1)[0]}-{2 ** 22 + 7}.xyz_9.data.tmp"
    dead.write_bytes(b"left by a kill")
    other = tmp_path / ".m.irb.notes.tmp"  # not our pattern
    other.write_bytes(b"user file")
    serde.save(model_for(6), path, weights="inline")
    assert mine.exists() and other.exists() and not dead.exists()

