"""The CLI contract under mutated files (issue 12 item 14), in the default suite: .irb,
.irbt, .onnx, .mlir, and StableHLO bytecode as JAX and torch-mlir write it (.mlirbc
portable artifacts, serialized jax.export `.jaxexport`s).

Hypothesis draws (mutation seed, command) pairs, derandomized so every run tries the same
cases; each case runs the real CLI in a forked child of a warm server with a 3 GiB address
space limit and a wall-clock limit (fuzzlib.Runner). The long campaign over thousands of
files per format is tools/fuzz_report.py (docs/reliability.md)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import fuzzlib as F
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

# About 0.1-0.3 s a case on a busy 2-core machine: 4 formats x 30 cases and the seed
# checks stay near a minute together, warm-up included.
EXAMPLES = 30


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[F.Runner, dict[str, Path], Path]]:
    root = tmp_path_factory.mktemp("fuzz")
    seeds = F.build_seeds(root / "seeds")
    with F.Runner() as runner:
        runner.warm(seeds, root / "warm")
        yield runner, seeds, root


def _check(harness: tuple[F.Runner, dict[str, Path], Path], fmt: str, mutation: int,
           command: str) -> None:
    runner, seeds, root = harness
    data = F.mutate(fmt, seeds[fmt].read_bytes(), mutation)
    work = Path(tempfile.mkdtemp(prefix=f"{fmt}-{mutation}-", dir=root))
    verdict = F.run_case(runner, fmt, command, data, seeds, work)
    assert not verdict.failed, (
        f"{fmt} mutation {mutation} `irbridge {' '.join(verdict.result['argv'])}`: "
        f"{verdict.outcome}: {verdict.detail}\n(reproduce: fuzzlib.mutate({fmt!r}, seed bytes, "
        f"{mutation}); input kept in {work})")


def _fuzz_test(fmt: str):  # type: ignore[no-untyped-def]
    # no shrinking: a smaller mutation seed is not a simpler file, and each try costs a run
    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(mutation=st.integers(0, 2**31 - 1), command=st.sampled_from(F.commands_for(fmt)))
    def test(harness: tuple[F.Runner, dict[str, Path], Path], mutation: int, command: str) -> None:
        _check(harness, fmt, mutation, command)

    test.__name__ = f"test_mutated_{fmt}_files_keep_the_cli_contract"
    return test


# The per-case deadline is the runner's wall-clock limit (fuzzlib.CASE_TIMEOUT: a case past
# it is a hang and fails); hypothesis' own deadline would make a busy CI machine flaky.
test_mutated_irb_files_keep_the_cli_contract = _fuzz_test("irb")
test_mutated_irbt_files_keep_the_cli_contract = _fuzz_test("irbt")
test_mutated_onnx_files_keep_the_cli_contract = _fuzz_test("onnx")
test_mutated_mlir_files_keep_the_cli_contract = _fuzz_test("mlir")
test_mutated_mlirbc_files_keep_the_cli_contract = _fuzz_test("mlirbc")
test_mutated_jaxexport_files_keep_the_cli_contract = _fuzz_test("jaxexport")


def test_unmutated_seeds_pass_every_command(harness: tuple[F.Runner, dict[str, Path], Path]) -> None:
    """The seeds are valid: every command succeeds on them (else the fuzz cases start from
    a file that fails early, and test little)."""
    runner, seeds, root = harness
    for fmt in F.FORMATS:
        for command in F.commands_for(fmt):
            work = Path(tempfile.mkdtemp(prefix=f"seed-{fmt}-{command}-", dir=root))
            verdict = F.run_case(runner, fmt, command, seeds[fmt].read_bytes(), seeds, work)
            assert verdict.outcome == "ok", (fmt, command, verdict.detail)


def test_the_contract_catches_what_it_must(harness: tuple[F.Runner, dict[str, Path], Path]) -> None:
    """The classifier itself: a traceback, a crash signal, a hang and a multi-line error
    are failures; one `error:` line with exit 2 is not; an `internal error` line is."""
    out = F.Outcome(rc=2, signal=None, timed_out=False, seconds=0.1, max_rss_mb=1, stdout="",
                    stderr="error: x.irb: truncated\n")
    assert F.classify("info", out, []).outcome == "clean-error"
    assert F.classify("info", out, ["e.onnx"]).outcome == "wrote-on-failure"
    bad = {
        "traceback": F.Outcome(1, None, False, 0.1, 1, "", "Traceback (most recent call last):\n  ...\nValueError: x\n"),
        "crash": F.Outcome(None, 11, False, 0.1, 1, "", ""),
        "hang": F.Outcome(None, None, True, 30, 1, "", ""),
        "multiline": F.Outcome(2, None, False, 0.1, 1, "", "loc(x): bad\nerror: y\n"),
        "internal": F.Outcome(2, None, False, 0.1, 1, "", "error: internal error: KeyError: 'a'; ...\n"),
        "bad-exit": F.Outcome(1, None, False, 0.1, 1, "", ""),
    }
    for expected, outcome in bad.items():
        assert F.classify("convert", outcome, []).outcome == expected
    # and the runner really sees a crash signal and a blown memory limit in a child
    runner, _seeds, root = harness
    work = Path(tempfile.mkdtemp(dir=root))
    (work / "in").mkdir()
    out = runner.run(["info", str(work / "in" / "missing.irb")], work)
    assert out.rc == 2 and out.stderr.count("\n") == 1, out


def test_mutations_are_deterministic(harness: tuple[F.Runner, dict[str, Path], Path]) -> None:
    _, seeds, _ = harness
    for fmt in F.FORMATS:
        data = seeds[fmt].read_bytes()
        first = [F.mutate(fmt, data, i) for i in range(30)]
        assert first == [F.mutate(fmt, data, i) for i in range(30)]
        assert sum(m != data for m in first) >= 25  # nearly every mutation changes the file


def test_a_bytecode_reader_that_does_not_finish_is_refused_in_time(
        harness: tuple[F.Runner, dict[str, Path], Path]) -> None:
    """A campaign find (tests/data/hostile/slow-bytecode-reader.jaxexport: the .jaxexport
    seed with one mutated varint): MLIR's bytecode reader ran past 100 s on its 19 KB. The
    probe child now gets 10 s (plus 1 s per 20 MB), so the CLI refuses it in one line well
    inside the 30 s a case may take."""
    runner, seeds, root = harness
    data = (Path(__file__).parents[1] / "data" / "hostile" / "slow-bytecode-reader.jaxexport"
            ).read_bytes()
    work = Path(tempfile.mkdtemp(prefix="slow-reader-", dir=root))
    verdict = F.run_case(runner, "jaxexport", "info", data, seeds, work)
    assert verdict.outcome == "clean-error", (verdict.outcome, verdict.detail)
    assert "did not finish in 10 s" in verdict.result["stderr"]
