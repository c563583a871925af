"""tools/instructions.py without valgrind: its case table, each case's options and `--list`, and
the fused call it counts without its wrapper. Counting itself needs valgrind and minutes a case,
so no test runs it (docs/benchmarks.md gives the commands)."""

from __future__ import annotations

import sys

import pytest
import repo_modules

CASES = ("drafting", "prepare_spec_decode_inputs", "sas_metadata", "compute_slot_mapping")
# Each case's options when none is given, as docs/benchmarks.md and docs/drafting.md describe them.
DEFAULTS = {
    "drafting": {"groups": 4, "reqs": 64, "k": 7, "non_causal": False, "calls": 200},
    "prepare_spec_decode_inputs": {"calls": 300},
    "sas_metadata": {"layer": "CFA", "reqs": 256, "calls": 500},
    "compute_slot_mapping": {"calls": 200},
}


@pytest.fixture(scope="module")
def tool():
    return repo_modules.load("tools/instructions.py")


def test_the_table_holds_the_four_cases(tool):
    assert tuple(tool.CASES) == CASES


@pytest.mark.parametrize("case", CASES)
def test_each_case_runs_at_its_documented_defaults(tool, case):
    assert tool.defaults(case) == DEFAULTS[case]
    # The defaults spelled out are accepted too, and parse to the same run.
    argv = [case]
    for key, value in DEFAULTS[case].items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not False:
            argv += [flag, str(value)]
    assert vars(tool.parse_args(argv)) == vars(tool.parse_args([case]))


def test_the_documented_drafting_command_parses(tool):
    args = tool.parse_args(["drafting", "--groups", "8", "--reqs", "64", "--k", "7", "--non-causal"])
    assert (args.case, args.groups, args.non_causal, args.measure) == ("drafting", 8, True, None)


def test_a_case_refuses_another_cases_option(tool, capsys):
    with pytest.raises(SystemExit):
        tool.parse_args(["compute_slot_mapping", "--groups", "8"])
    assert "--groups" in capsys.readouterr().err


def test_no_case_is_an_error(tool, capsys):
    with pytest.raises(SystemExit):
        tool.parse_args([])
    assert "--list" in capsys.readouterr().err


def test_list_prints_every_case_and_its_defaults(tool, capsys):
    assert tool.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == list(CASES)
    assert "groups=4 reqs=64 k=7 non_causal=False calls=200" in lines[0]
    assert "layer=CFA reqs=256 calls=500" in lines[2]


def test_loading_defines_and_nothing_else(capsys):
    # Loading must print nothing and import nothing heavy (torch and the benchmarks are imported
    # by the run under valgrind).
    before = set(sys.modules)
    repo_modules.load("tools/instructions.py")
    assert capsys.readouterr() == ("", "")
    assert set(sys.modules) == before


def test_the_fused_body_calls_the_op_as_the_wrapper_did(tool, monkeypatch):
    """The prepare case's "fused body + restore": the FastOp the wrapper ends in, called with the
    arguments the wrapper passed it (captured from one wrapper call through the op's select()),
    each call of the body one call of it; the op's own select() is back afterwards."""
    import torch

    import specops
    from specops.bench import prepare_spec_decode_inputs as bench
    from specops.ops.registry import OPS

    if "native" not in specops.available_backends():
        pytest.skip("native extension not built")
    op = OPS["prepare_spec_decode_inputs"]
    entry, calls = op.native_entry, []

    def counted(*args, **kwargs):
        calls.append((args, kwargs))
        return entry(*args, **kwargs)

    select = op.select
    monkeypatch.setattr(op, "native_entry", counted)
    body = tool._fused_body(bench.cases(torch.device("cpu"), quick=True)[0])
    assert op.select is select and len(calls) == 1
    body()
    body()
    assert len(calls) == 3 and calls[1] == calls[2] == calls[0]
