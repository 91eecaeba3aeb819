"""The verifier on hand-built IR (one error per op family and per structural / collective rule,
each naming the instruction and the shapes) and on every module of the corpus."""

from __future__ import annotations

import glob
import json
import os

import pytest

from xladist.errors import InputError, VerifierError
from xladist.hlo import collective_groups as cg
from xladist.hlo import parser
from xladist.hlo.attrs import Literal, ReplicaGroups
from xladist.hlo.ir import Computation, Instruction, Module
from xladist.hlo.verifier import verify_module

from .test_shape_inference import S, binary_comp
from tests.paths import TESTS

CORPUS = str(TESTS / "data" / "corpus")


class Comp:
    """A computation under construction: param()/op() append, done() sets the root."""

    def __init__(self, name: str):
        self.c = Computation(name)
        self.params = 0

    def param(self, shape: str, name: str | None = None) -> Instruction:
        n = self.params
        self.params += 1
        return self.c.add(Instruction(name or f"p{n}", "parameter", S(shape),
                                      parameter_number=n))

    def op(self, opcode: str, shape: str, *operands, name: str | None = None,
           **attrs) -> Instruction:
        name = name or f"{opcode}.{len(self.c.instructions)}"
        return self.c.add(Instruction(name, opcode, S(shape), operands, attrs))

    def done(self, root: Instruction | None = None) -> Computation:
        self.c.root = root or self.c.instructions[-1]
        return self.c


def module(entry: Computation, *others: Computation, replica_count=1,
           num_partitions=1) -> Module:
    m = Module("m")
    m.replica_count, m.num_partitions = replica_count, num_partitions
    for c in others:
        m.add_computation(c)
    m.add_computation(entry, entry=True)
    return m


def single(opcode: str, operand_shapes: list[str], result: str, *extra: Computation,
           **attrs) -> Module:
    """ENTRY with one parameter per operand shape and one `opcode` instruction as root."""
    b = Comp("main")
    ps = [b.param(s) for s in operand_shapes]
    b.op(opcode, result, *ps, name="the_op", **attrs)
    return module(b.done(), *extra)


def verify_error(m: Module, **kw) -> VerifierError:
    with pytest.raises(VerifierError) as e:
        verify_module(m, **kw)
    return e.value


def groups(*gs):
    return ReplicaGroups(tuple(tuple(g) for g in gs))


# ---- valid modules ------------------------------------------------------------------------------

def test_valid_module_report():
    add = binary_comp()
    b = Comp("main")
    x = b.param("f32[4,2]")
    y = b.op("multiply", "f32[4,2]", x, x)
    b.op("all-reduce", "f32[4,2]", y, channel_id=1, replica_groups=groups((0, 1)),
         use_global_device_ids=True, to_apply=add)
    m = module(b.done(), add, num_partitions=2)
    report = verify_module(m)
    assert (report.computations, report.instructions) == (2, 6)
    assert report.has_collectives and report.num_devices == 2 and not report.warnings


def test_elided_constant_is_a_warning():
    b = Comp("main")
    c = b.op("constant", "f32[20]")
    c.literal = Literal(S("f32[20]"), None)
    report = verify_module(module(b.done()))
    assert any("cannot execute" in w for w in report.warnings)


# ---- one shape error per op family: the message names the instruction and the shapes ---------

@pytest.mark.parametrize("opcode,operands,result,attrs,needles", [
    ("add", ["f32[2,3]", "f32[2,3]"], "f32[3,2]", {}, ["f32[2,3]", "f32[3,2]"]),
    ("add", ["f32[2,3]", "s32[2,3]"], "f32[2,3]", {}, ["f32[2,3]", "s32[2,3]"]),
    ("negate", ["pred[2]"], "pred[2]", {}, ["pred[2]"]),
    ("compare", ["f32[2]", "f32[2]"], "f32[2]", {"direction": "LT"}, ["pred[2]", "f32[2]"]),
    ("convert", ["f32[2]"], "s32[3]", {}, ["s32[3]", "f32[2]"]),
    ("transpose", ["f32[2,3]"], "f32[2,3]", {"dimensions": (1, 0)}, ["f32[3,2]", "f32[2,3]"]),
    ("dot", ["f32[2,3]", "f32[4,5]"], "f32[2,5]",
     {"lhs_contracting_dims": (1,), "rhs_contracting_dims": (0,)}, ["f32[2,3]", "f32[4,5]"]),
    ("fft", ["f32[4,8]"], "c64[4,8]", {"fft_type": "RFFT", "fft_length": (8,)},
     ["c64[4,5]", "c64[4,8]"]),
    ("get-dimension-size", ["f32[3]"], "s64[]", {"dimensions": (0,)}, ["s32[]", "s64[]"]),
    ("replica-id", [], "s32[]", {}, ["u32[]", "s32[]"]),
])
def test_shape_errors_name_instruction_and_shapes(opcode, operands, result, attrs, needles):
    err = verify_error(single(opcode, operands, result, **attrs))
    text = str(err)
    assert "%the_op" in text and "computation main" in text
    for n in needles:
        assert n in text, (n, text)


def test_reduce_with_wrong_reducer():
    mul_s32 = binary_comp("mul", "s32", "multiply")
    err = verify_error(single("reduce", ["f32[4,3]", "f32[]"], "f32[3]", mul_s32,
                              dimensions=(0,), to_apply=mul_s32))
    assert "to_apply=mul (s32[], s32[]) -> s32[]" in str(err)
    assert "init value 0 is f32[]" in str(err)


def test_while_condition_must_return_pred():
    state = "(s32[], f32[3])"
    cb = Comp("cond")
    cb.op("get-tuple-element", "s32[]", cb.param(state), index=0)
    cond = cb.done()
    bb = Comp("body")
    body = bb.done(bb.param(state))
    err = verify_error(single("while", [state], state, cond, body, condition=cond, body=body))
    assert "condition=cond ((s32[], f32[3])) -> s32[] must return pred[]" in str(err)


def test_conditional_branch_results_differ():
    a, b2 = Comp("a"), Comp("b")
    a.op("negate", "f32[2]", a.param("f32[2]"))
    b2.op("negate", "f32[3]", b2.param("f32[3]"))
    ca, cb_ = a.done(), b2.done()
    err = verify_error(single("conditional", ["s32[]", "f32[2]", "f32[3]"], "f32[2]", ca, cb_,
                              branch_computations=[ca, cb_]))
    assert "branch 0 returns f32[2], branch 1 (b) returns f32[3]" in str(err)


def test_fusion_argument_mismatch():
    f = Comp("fused")
    f.op("negate", "f32[4]", f.param("f32[4]"))
    fused = f.done()
    err = verify_error(single("fusion", ["f32[5]"], "f32[4]", fused, kind="kLoop", calls=fused))
    assert "operand 0 is f32[5] but parameter 0 of calls=fused (f32[4]) -> f32[4]" in str(err)


# ---- structure and attributes ------------------------------------------------------------------

def test_parameter_numbers_without_gaps():
    b = Comp("main")
    b.param("f32[]")
    p = b.param("f32[]")
    p.parameter_number = 2
    err = verify_error(module(b.done()))
    assert "numbered 0..1" in str(err) and "missing [1]" in str(err)


def test_missing_root_and_foreign_operand():
    b = Comp("main")
    b.param("f32[]")
    c = b.c
    m = module(c)
    c.root = None
    assert "no root" in str(verify_error(m))
    other = Comp("other")
    stranger = other.param("f32[]", name="stranger")
    b2 = Comp("main")
    b2.op("negate", "f32[]", stranger, name="neg")
    assert "operand 0 %stranger is not an instruction of computation main" in str(
        verify_error(module(b2.done())))


def test_operand_count_and_required_attribute():
    err = verify_error(single("negate", ["f32[]", "f32[]"], "f32[]"))
    assert "negate takes 1 operand(s), got 2" in str(err)
    err = verify_error(single("transpose", ["f32[2,3]"], "f32[3,2]"))
    assert "requires attribute dimensions=" in str(err)
    err = verify_error(single("transpose", ["f32[2,3]"], "f32[3,2]", dimensions=1))
    assert "dimensions= should be of kind ints" in str(err)


def test_recursive_calls_rejected():
    b = Comp("main")
    x = b.param("f32[]")
    call = b.op("call", "f32[]", x)
    main = b.done()
    call.attrs["to_apply"] = main
    assert "recursively" in str(verify_error(module(main)))


def test_entry_computation_layout_checked():
    b = Comp("main")
    b.op("negate", "f32[2]", b.param("f32[2]"))
    m = module(b.done())
    m.entry_computation_layout = ([S("f32[2]")], S("f32[2]"))
    verify_module(m)
    m.entry_computation_layout = ([S("f32[3]")], S("f32[2]"))
    err = verify_error(m)
    assert "entry_computation_layout parameter 0" in str(err)
    assert err.expected == "f32[3]" and err.actual == "f32[2]"


def test_done_must_consume_its_start():
    b = Comp("main")
    tok = b.op("after-all", "token[]")
    data = b.param("f32[2]")
    send = b.op("send", "(f32[2], u32[], token[])", data, tok, channel_id=1)
    recv = b.op("recv", "(f32[2], u32[], token[])", tok, channel_id=1)
    b.op("send-done", "token[]", recv, channel_id=1, name="bad_done")
    err = verify_error(module(b.done()))
    assert "%bad_done" in str(err) and "must consume a send" in str(err)
    b.c.instructions[-1].operands = [send]
    b.c.instructions[-1].attrs["channel_id"] = 2
    assert "same channel_id (2 vs 1)" in str(verify_error(module(b.c)))


def test_num_devices_must_fit_the_module():
    """The counts a module declares are fixed; the run's device total fills the other one
    (collective_groups.run_device_counts, XLA's header-over-config rule)."""
    b = Comp("main")
    b.param("f32[]")
    m = module(b.done(), num_partitions=4)
    assert verify_module(m, num_devices=4).replica_count == 1
    report = verify_module(m, num_devices=8)   # the other 2 are replicas
    assert (report.replica_count, report.num_partitions) == (2, 4)
    with pytest.raises(InputError, match="num_partitions=4, which does not divide the 6"):
        verify_module(m, num_devices=6)
    both = module(b.done(), replica_count=2, num_partitions=2)
    with pytest.raises(InputError, match="= 4 devices; run it with -n 4, not -n 8"):
        verify_module(both, num_devices=8)


def test_count_mismatch_says_which_count_the_run_gave():
    """A module declaring num_partitions=2 run with --replica-count 4 on 4 devices was told
    "module m is built for replica_count=4 x num_partitions=2": the module says nothing of
    4 replicas, the run asked for them."""
    from xladist.hlo.collective_groups import run_device_counts
    b = Comp("main")
    b.param("f32[]")
    m = module(b.done(), num_partitions=2)
    with pytest.raises(InputError) as e:
        run_device_counts(m, 4, replica_count=4)
    text = str(e.value)
    assert "declares num_partitions=2" in text and "the run asks for replica_count=4" in text
    assert "built for" not in text and "run it with -n 8, not -n 4" in text


# ---- collectives (docs/reference/collective-semantics.md A.1-A.6, B.9, C.11-C.14) ------------------------------

def _collective(opcode, operand, result, *, partitions=4, replicas=1, **attrs) -> Module:
    add = binary_comp()
    if opcode in ("all-reduce", "reduce-scatter"):
        attrs.setdefault("to_apply", add)
    b = Comp("main")
    b.op(opcode, result, b.param(operand), name="coll", **attrs)
    return module(b.done(), add, num_partitions=partitions, replica_count=replicas)


@pytest.mark.parametrize("attrs,message", [
    (dict(channel_id=1, use_global_device_ids=True, replica_groups=groups((0, 1), (2, 4))),
     "flattened id 4 is out of range [0, 4)"),
    (dict(channel_id=1, use_global_device_ids=True, replica_groups=groups((0, 1), (1, 2))),
     "flattened id 1 appears twice"),
    (dict(channel_id=1, use_global_device_ids=True, replica_groups=groups((0, 1), (2,))),
     "missing [3]"),
    (dict(channel_id=1, use_global_device_ids=True, replica_groups=groups()),
     "replica_groups={} is invalid with use_global_device_ids=true"),
    (dict(use_global_device_ids=True, replica_groups=groups((0, 1, 2, 3))),
     "use_global_device_ids=true requires a channel_id"),
    (dict(channel_id=-1, replica_groups=groups((0,))), "channel_id=-1 must not be negative"),
    (dict(channel_id=0, replica_groups=groups((0,))), "channel_id=0"),
])
def test_all_reduce_group_errors(attrs, message):
    err = verify_error(_collective("all-reduce", "f32[4]", "f32[4]", **attrs))
    assert message in str(err) and "%coll" in str(err)


def test_channel_id_zero_only_refused_on_all_reduce():
    """XLA's verifier refuses an all-reduce whose channel_id is 0 ("All reduce channel id
    must be greater than 0", docs/reference/collective-semantics.md C.10); xladist ran it as
    a channel (group mode cross-replica-and-partition). Found by a hand-written 2x2 program.
    Other collectives and send/recv take channel 0 as XLA does."""
    err = verify_error(_collective("all-reduce", "f32[4]", "f32[4]", channel_id=0,
                                   replica_groups=groups((0,))))
    assert "channel_id=0" in str(err) and "greater than 0" in str(err)
    verify_module(_collective("all-gather", "f32[4]", "f32[16]", channel_id=0, dimensions=(0,),
                              replica_groups=groups((0,))))
    verify_module(_collective("collective-permute", "f32[4]", "f32[4]", channel_id=0,
                              source_target_pairs=((0, 1),)))


def test_in_place_collective_permute_is_refused_by_name():
    """The 4-operand in-place collective-permute (slice_sizes) verified, then crashed both
    backends on every rank with an internal error; xladist does not run it, and says so
    before anything runs."""
    for opcode, result in (("collective-permute", "f32[4,2]"),
                           ("collective-permute-start", "(f32[4,2], f32[4,2], u32[], u32[])")):
        b = Comp("main")
        x = b.param("f32[4,2]")
        o = b.param("f32[4,2]")
        z = b.op("constant", "s32[]", name="z", literal="0")
        i = b.op("tuple", "(s32[], s32[])", z, z, name="i")
        b.op(opcode, result, x, o, i, i, name="cp", source_target_pairs=((0, 1), (1, 0)),
             slice_sizes=((2, 2),))
        err = verify_error(module(b.done(), replica_count=2))
        assert "in-place form" in str(err) and "%cp" in str(err), str(err)


@pytest.mark.parametrize("op", [
    "all-to-all(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}",
    "collective-broadcast(x), channel_id=1, replica_groups={{0,1}}",
    "collective-permute(x), channel_id=1, source_target_pairs={{0,1}}",
])
def test_use_global_device_ids_on_an_op_without_the_flag_is_refused(op):
    """all-to-all, collective-broadcast and collective-permute have no use_global_device_ids
    (docs/reference/collective-semantics.md A.2; XLA's parser rejects the attribute there).
    xladist kept it as an unknown attribute and ignored it, so a writer who meant flattened
    ids got partition ids without a word."""
    text = ("HloModule m, replica_count=2, num_partitions=2\nENTRY e {\n"
            "  x = f32[4] parameter(0)\n"
            f"  ROOT coll = f32[4] {op}, use_global_device_ids=true\n}}\n")
    err = verify_error(parser.parse_module(text))
    assert "use_global_device_ids" in str(err) and "%coll" in str(err), str(err)
    assert "no use_global_device_ids" in str(err)


def test_all_reduce_allows_ragged_groups_others_do_not():
    attrs = dict(channel_id=1, use_global_device_ids=True, replica_groups=groups((0,), (1, 2, 3)))
    verify_module(_collective("all-reduce", "f32[4]", "f32[4]", **attrs))
    err = verify_error(_collective("all-gather", "f32[4]", "f32[12]", dimensions=(0,), **attrs))
    assert "all groups must have the same size for all-gather" in str(err)


def test_group_mode_reads_ids_per_mode():
    # No channel: replica ids; 2 replicas x 2 partitions -> ids 0..1 only.
    verify_module(_collective("all-reduce", "f32[4]", "f32[4]", replicas=2, partitions=2,
                              replica_groups=groups((0, 1))))
    err = verify_error(_collective("all-reduce", "f32[4]", "f32[4]", replicas=2, partitions=2,
                                   replica_groups=groups((0, 1, 2, 3))))
    assert "CrossReplica" in str(err) and "replica id 2 is out of range [0, 2)" in str(err)
    assert cg.group_mode("all-reduce", 1, False) is cg.GroupMode.CROSS_REPLICA_AND_PARTITION
    assert cg.group_mode("all-to-all", 1, None) is cg.GroupMode.CROSS_PARTITION
    assert cg.group_mode("all-gather", 3, True) is cg.GroupMode.FLATTENED_ID


def test_all_gather_and_reduce_scatter_sizes_follow_the_group():
    # {} with a channel and no flag on all-gather: CrossReplicaAndPartition over R=1 ids;
    # with use_global_device_ids the group is explicit.
    ok = dict(channel_id=1, use_global_device_ids=True, replica_groups=groups((0, 1), (2, 3)))
    verify_module(_collective("all-gather", "f32[3,2]", "f32[3,4]", dimensions=(1,), **ok))
    err = verify_error(_collective("all-gather", "f32[3,2]", "f32[3,8]", dimensions=(1,), **ok))
    assert "f32[3,4]" in str(err) and "f32[3,8]" in str(err)
    # replica_groups={} without channel over 4 replicas: group size 4 comes from the module.
    err = verify_error(_collective("all-gather", "f32[2]", "f32[6]", replicas=4, partitions=1,
                                   dimensions=(0,), replica_groups=groups()))
    assert "gathers over groups of 4" in str(err) and "f32[6]" in str(err)
    err = verify_error(_collective("reduce-scatter", "f32[6]", "f32[3]", replicas=4,
                                   partitions=1, dimensions=(0,), replica_groups=groups()))
    assert "not divisible by the group size 4" in str(err)


def test_cross_replica_and_partition_groups_span_partitions():
    # R=2, P=2, channel_id without use_global_device_ids: group {0,1} of replica ids is the 4
    # devices (r0,p0),(r0,p1),(r1,p0),(r1,p1) (A.3), so all-gather multiplies by 4.
    attrs = dict(channel_id=1, replica_groups=groups((0, 1)), dimensions=(0,))
    verify_module(_collective("all-gather", "f32[2]", "f32[8]", replicas=2, partitions=2,
                              **attrs))
    err = verify_error(_collective("all-gather", "f32[2]", "f32[4]", replicas=2, partitions=2,
                                   **attrs))
    assert "gathers over groups of 4" in str(err) and err.expected == "f32[8]"


@pytest.mark.parametrize("replicas,partitions", [(1, 2), (2, 2), (3, 2), (1, 4)])
def test_empty_groups_with_a_channel_span_every_device(replicas, partitions):
    # all-gather / reduce-scatter with a channel_id, no use_global_device_ids and
    # replica_groups={}: CrossReplicaAndPartition, one group of every replica id, each bringing
    # all P partitions (A.3, A.5), so the group is R x P devices - not R (a group of 1 at R=1).
    n = replicas * partitions
    attrs = dict(channel_id=1, replica_groups=groups(), dimensions=(0,))
    mode = cg.group_mode("all-gather", 1, None)
    assert mode is cg.GroupMode.CROSS_REPLICA_AND_PARTITION
    assert cg.device_group_size(groups(), mode, replicas, partitions) == n
    # The runtime's groups (the members an all-gather really concatenates) agree.
    da = cg.DeviceAssignment.default(replicas, partitions)
    assert [len(g) for g in cg.instruction_device_groups("all-gather", attrs, da)] == [n]
    kw = dict(replicas=replicas, partitions=partitions, **attrs)
    verify_module(_collective("all-gather", "f32[2,3]", f"f32[{2 * n},3]", **kw))
    err = verify_error(_collective("all-gather", "f32[2,3]", f"f32[{2 * replicas},3]", **kw))
    assert f"gathers over groups of {n}" in str(err) and err.expected == f"f32[{2 * n},3]"
    verify_module(_collective("reduce-scatter", f"f32[{2 * n}]", "f32[2]", **kw))
    err = verify_error(_collective("reduce-scatter", f"f32[{2 * n}]", f"f32[{2 * n // replicas}]",
                                   **kw))
    assert f"scatters over groups of {n}" in str(err) and err.expected == "f32[2]"


def test_all_to_all_group_size():
    b = Comp("main")
    ps = [b.param("f32[4,2]") for _ in range(3)]
    b.op("all-to-all", "(f32[4,2], f32[4,2], f32[4,2])", *ps, name="a2a", channel_id=1,
         replica_groups=groups())
    err = verify_error(module(b.done(), num_partitions=4))
    assert "one operand per group member (4), got 3" in str(err) and "%a2a" in str(err)
    err = verify_error(_collective("all-to-all", "f32[6]", "f32[6]", channel_id=1,
                                   dimensions=(0,), replica_groups=groups()))
    assert "into 4 blocks" in str(err)


@pytest.mark.parametrize("pairs,has_channel,message", [
    (((0, 1), (1, 1)), True, "target 1 appears more than once"),
    (((0, 1), (0, 2)), True, "source 0 appears more than once"),
    (((0, 4),), True, "partition id 4 is out of range [0, 4)"),
    (((0, 1),), False, "replica id 1 is out of range [0, 1)"),
])
def test_collective_permute_pairs(pairs, has_channel, message):
    attrs = dict(source_target_pairs=pairs)
    if has_channel:
        attrs["channel_id"] = 1
    err = verify_error(_collective("collective-permute", "f32[3]", "f32[3]", **attrs))
    assert message in str(err)


def test_self_pairs_and_partial_permutations_are_valid():
    verify_module(_collective("collective-permute", "f32[3]", "f32[3]", channel_id=1,
                              source_target_pairs=((0, 0), (1, 2))))


def test_module_without_device_count_takes_the_runs_counts():
    """A module declaring no counts runs as the run says: -n 4 alone is 4 replicas (the
    runtime's reading too), so a permute over partition ids needs the run's partitions."""
    m = _collective("collective-permute", "f32[3]", "f32[3]", partitions=1, channel_id=1,
                    source_target_pairs=((0, 1), (1, 2), (2, 3), (3, 0)))
    err = verify_error(m, num_devices=4)
    assert "partition id 1 is out of range [0, 1)" in str(err)
    assert "--num-partitions" in str(err)
    report = verify_module(m, counts=(1, 4))
    assert (report.replica_count, report.num_partitions) == (1, 4)
    plain = _collective("collective-permute", "f32[3]", "f32[3]", partitions=1,
                        source_target_pairs=((0, 1), (1, 2), (2, 3), (3, 0)))
    assert verify_module(plain, num_devices=4).replica_count == 4
    with pytest.raises(VerifierError):
        verify_module(m)


# ---- the corpus -------------------------------------------------------------------------------

def _corpus_files():
    return sorted(glob.glob(os.path.join(CORPUS, "**", "module*.hlo"), recursive=True))


@pytest.mark.parametrize("path", _corpus_files(),
                         ids=lambda p: os.path.relpath(p, CORPUS))
def test_corpus_modules_verify(path):
    with open(os.path.join(os.path.dirname(path), "case.json")) as f:
        case = json.load(f)
    with open(path) as f:
        m = parser.parse_module(f.read(), filename=path)
    n = case.get("num_devices")
    # JAX runs its programs as n partitions; the text before partitioning does not say so
    # (JAX passes num_partitions in the module config), so the run gives it, as XLA's does.
    counts = (1, n) if n and "unoptimized" in path else None
    report = verify_module(m, num_devices=n, counts=counts)
    assert report.instructions > 0


def _corpus_module(name):
    with open(os.path.join(CORPUS, "jax", name, "module.hlo")) as f:
        return parser.parse_module(f.read())


def test_corpus_mutations_are_caught():
    m = _corpus_module("psum_scatter_basic_mesh4")
    rs = next(i for i in m.all_instructions() if i.opcode == "reduce-scatter")
    rs.attrs["replica_groups"] = groups((0, 1, 2))
    assert "missing [3]" in str(verify_error(m))
    m = _corpus_module("all_to_all_basic_mesh4")
    a2a = next(i for i in m.all_instructions() if i.opcode == "all-to-all")
    a2a.attrs["replica_groups"] = groups((0, 1), (2, 3))
    assert "one operand per group member (2), got 4" in str(verify_error(m))
    m = _corpus_module("while_loop_psum_mesh4")
    w = next(i for i in m.all_instructions() if i.opcode == "while")
    w.attrs["condition"], w.attrs["body"] = w.attrs["body"], w.attrs["condition"]
    assert "must return pred[]" in str(verify_error(m))


ASYNC = """HloModule a, num_partitions=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x: f32[4,8]) -> (f32[4,8], f32[4,8], f32[4,8], f32[2,8], f32[4,8]) {
  %x = f32[4,8]{1,0} parameter(0)
  %a2a-start = ((f32[4,8]{1,0}), f32[4,8]{1,0}) all-to-all-start(%x), channel_id=3, replica_groups={{0,1}}, dimensions={0}
  %a2a-done = f32[4,8]{1,0} all-to-all-done(%a2a-start)
  %ars = f32[4,8]{1,0} all-reduce-start(%x), channel_id=4, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=%add
  %ard = f32[4,8]{1,0} all-reduce-done(%ars)
  %cps = (f32[4,8]{1,0}, f32[4,8]{1,0}, u32[], u32[]) collective-permute-start(%x), channel_id=5, source_target_pairs={{0,1},{1,0}}
  %cpd = f32[4,8]{1,0} collective-permute-done(%cps)
  %rss = ((f32[4,8]{1,0}), f32[2,8]{1,0}) reduce-scatter-start(%x), channel_id=6, replica_groups={{0,1}}, use_global_device_ids=true, dimensions={0}, to_apply=%add
  %rsd = f32[2,8]{1,0} reduce-scatter-done(%rss)
  %cs = (f32[4,8]{1,0}, f32[4,8]{1,0}, u32[]) copy-start(%x)
  %cd = f32[4,8]{1,0} copy-done(%cs)
  ROOT %t = (f32[4,8]{1,0}, f32[4,8]{1,0}, f32[4,8]{1,0}, f32[2,8]{1,0}, f32[4,8]{1,0}) tuple(%a2a-done, %ard, %cpd, %rsd, %cd)
}
"""


def test_async_forms_including_sugared_wrappers():
    m = parser.parse_module(ASYNC)
    report = verify_module(m)
    assert report.has_collectives
    # The wrapped all-to-all lives in a synthesized computation and is checked there.
    bad = parser.parse_module(ASYNC.replace("replica_groups={{0,1}}, dimensions={0}\n",
                                            "replica_groups={{0,1,2}}, dimensions={0}\n"))
    err = verify_error(bad)
    assert "partition id 2 is out of range [0, 2)" in str(err) and err.line == 11
    bad = parser.parse_module(ASYNC.replace("f32[2,8]{1,0}) reduce-scatter-start",
                                            "f32[4,8]{1,0}) reduce-scatter-start"))
    err = verify_error(bad)
    assert "must be 2 for operand f32[4,8]" in str(err) and err.actual == "f32[4,8]"


# ---- what XLA's own tests write (issue 30 items 4 and 5) ---------------------------------------

_SEND_RECV_CH0 = """HloModule t
ENTRY e {
  p = u32[2] parameter(0)
  t = token[] after-all()
  r = (u32[2], u32[], token[]) recv(t), channel_id=0, frontend_attributes={_xla_send_recv_source_target_pairs="{{1,0}}"}
  s = (u32[2], u32[], token[]) send(p, t), channel_id=0, frontend_attributes={_xla_send_recv_source_target_pairs="{{1,0}}"}
  rd = (u32[2], token[]) recv-done(r), channel_id=0
  sd = token[] send-done(s)DONE_CHANNEL
  ROOT x = u32[2] get-tuple-element(rd), index=0
}
"""


def test_channel_id_zero_is_a_channel():
    """XLA's CollectiveOpsTest.SendRecv_Simple uses channel_id=0; XLA checks only shapes. A
    done without the channel its start has is still refused (0 is not 'no channel')."""
    from xladist import parse_hlo
    verify_module(parse_hlo(_SEND_RECV_CH0.replace("DONE_CHANNEL", ", channel_id=0")),
                  num_devices=2)
    err = verify_error(parse_hlo(_SEND_RECV_CH0.replace("DONE_CHANNEL", "")), num_devices=2)
    assert "must have the same channel_id (None vs 0)" in str(err)


@pytest.mark.parametrize("start_shape", ["(u32[2], u32[2])", "(u32[2], u32[2], u32[], u32[])"])
def test_collective_permute_start_with_or_without_contexts(start_shape):
    """XLA's CollectiveOpsTest.AsyncCollectivePermute declares the 2-tuple; XLA's printer
    writes the 4-tuple with two u32[] contexts. Both are the same op (the contexts are what
    the declared shape lists after operand and result)."""
    from xladist import parse_hlo
    m = parse_hlo(f"""HloModule t
ENTRY e {{
  p = u32[2] parameter(0)
  start = {start_shape} collective-permute-start(p), source_target_pairs={{{{0,1}},{{1,0}}}}
  ROOT done = u32[2] collective-permute-done(start)
}}
""")
    verify_module(m, num_devices=2)
    bad = parse_hlo("""HloModule t
ENTRY e {
  p = u32[2] parameter(0)
  start = (u32[2], f32[2]) collective-permute-start(p), source_target_pairs={{0,1},{1,0}}
  ROOT done = f32[2] collective-permute-done(start)
}
""")
    assert "differs" in str(verify_error(bad, num_devices=2))


_AR_START = """HloModule m, replica_count=2
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[4] parameter(0)
  start = f32[4] all-reduce-start(x), replica_groups={{0,1}}, to_apply=add
DONES
}
"""


@pytest.mark.parametrize("dones,why", [
    ("  ROOT y = f32[4] negate(x)", "its users: none"),
    ("  d1 = f32[4] all-reduce-done(start)\n  d2 = f32[4] all-reduce-done(start)\n"
     "  ROOT y = f32[4] add(d1, d2)", "its users: %d1 (all-reduce-done), %d2 (all-reduce-done)"),
])
def test_a_start_must_be_completed_by_exactly_one_done(dones, why):
    """As XLA's verifier: a start nothing completes (or two dones complete) leaves its
    transfer in flight past the program's end; it ran before, its transfers never waited."""
    from xladist.hlo.parser import parse_module
    module = parse_module(_AR_START.replace("DONES", dones))
    err = verify_error(module)
    assert "instruction `%start = " in str(err)
    assert "all-reduce-start must have exactly one user, all-reduce-done, that completes it" \
        in str(err) and why in str(err)
    good = parse_module(_AR_START.replace(
        "DONES", "  ROOT d = f32[4] all-reduce-done(start)"))
    verify_module(good)


def test_an_async_group_start_without_its_done_is_refused():
    from xladist.hlo.parser import parse_module
    from tests.paths import DATA
    text = (DATA / "deadlock" / "async_group_exchange.n2.hlo").read_text()
    verify_module(parse_module(text))  # its sends and recvs are the async body's root
    cut = text[:text.index("  %done = ")] + \
        "  ROOT %out = (f32[4]{0}, f32[4]{0}) tuple(%x, %y)\n}\n"
    err = verify_error(parse_module(cut))
    assert "async-start must have exactly one user, async-update or async-done" in str(err)


_ALIAS_BODY = """
ENTRY main {
  a = f32[2] parameter(0)
  b = (f32[2], s32[]) parameter(1)
  ROOT t = (f32[2], f32[2], s32[2]) tuple(a, a, s32[2] constant({1, 2}))
}
"""


@pytest.mark.parametrize("header, message", [
    # What XLA's HloInputOutputAliasConfig::SetUpAlias / Verify and
    # HloBufferDonorConfig::Verify refuse; the verifier took every one of these.
    ("input_output_alias={ {5}: (0, {}, may-alias) }",
     r"the result: shape index \{5\} does not name an array in \(f32\[2\], f32\[2\], s32\[2\]\)"),
    ("input_output_alias={ {0,0}: (0, {}, may-alias) }", r"shape index \{0,0\} does not name"),
    ("input_output_alias={ {0}: (7, {}, may-alias) }",
     r"parameter 7 does not exist \(ENTRY main has 2 parameters\)"),
    ("input_output_alias={ {0}: (0, {3}, may-alias) }",
     r"parameter 0: shape index \{3\} does not name an array in f32\[2\]"),
    ("input_output_alias={ {1}: (1, {}, may-alias) }",
     r"parameter 1: shape index \{\} does not name an array in \(f32\[2\], s32\[\]\)"),
    ("input_output_alias={ {0}: (0, {}, may-alias), {0}: (1, {0}, may-alias) }",
     r"output index \{0\} is aliased twice"),
    ("input_output_alias={ {0}: (0, {}, may-alias), {1}: (0, {}, must-alias) }",
     r"parameter 0 at \{\} is aliased with two outputs"),
    ("input_output_alias={ {2}: (1, {1}, may-alias) }",
     r"an aliased parameter and output must have the same size"),
    ("buffer_donor={ (9, {}) }", r"buffer_donor \(9, \{\}\): parameter 9 does not exist"),
    ("buffer_donor={ (0, {}) }, input_output_alias={ {0}: (0, {}, may-alias) }",
     r"buffer_donor \(0, \{\}\): the parameter is also in input_output_alias"),
])
def test_aliasing_headers_are_checked_against_the_entry(header, message):
    m = parser.parse_module("HloModule m, " + header + _ALIAS_BODY)
    with pytest.raises(VerifierError, match=message):
        verify_module(m)


def test_valid_aliasing_headers_verify():
    m = parser.parse_module("HloModule m, input_output_alias={ {0}: (0, {}, may-alias), "
                     "{1}: (1, {0}, must-alias) }, buffer_donor={ (1, {1}) }" + _ALIAS_BODY)
    verify_module(m)
    assert m.input_output_alias == [((0,), 0, (), "may-alias"), ((1,), 1, (0,), "must-alias")]
    assert m.buffer_donors == [(1, (1,))]


def _many_calls(n: int) -> str:
    """An entry calling n computations of its own, one after the other."""
    lines = ["HloModule calls", ""]
    for i in range(n):
        lines += [f"%f{i} (p: f32[4]) -> f32[4] {{", "  %p = f32[4] parameter(0)",
                  "  ROOT %r = f32[4] negate(%p)", "}", ""]
    lines += ["ENTRY %main (x: f32[4]) -> f32[4] {", "  %v0 = f32[4] parameter(0)"]
    lines += [f"  {'ROOT ' if i == n else ''}%v{i} = f32[4] call(%v{i - 1}), to_apply=%f{i - 1}"
              for i in range(1, n + 1)]
    return "\n".join(lines + ["}", ""])


def test_verifying_many_called_computations_compares_them_a_linear_number_of_times(
        monkeypatch):
    # Before: Computation.called_computations kept the computations it had seen in a list
    # and scanned it for each call, so verifying an entry that calls n computations compared
    # ~n^2/2 pairs (5,000 calls: 0.65 s of verify, 10,000: 2.9 s).
    n = 2000
    module = parser.parse_module(_many_calls(n))
    compared = [0]

    def counting_eq(self, other):
        compared[0] += 1
        return self is other

    monkeypatch.setattr(Computation, "__eq__", counting_eq)
    verify_module(module)
    assert compared[0] <= 4 * n, f"{compared[0]:,} comparisons of computations for {n} calls"


# A variadic scatter whose updates differ in their window size. Found by mutating XLA's
# emitter test scatter/variadic_scatter_argmax.hlo: the verifier accepted it, then the
# interpreter failed with an internal IndexError and the cpu backend read the smaller
# update past its end.
_SCATTER_UNEQUAL_UPDATES = """HloModule m
combine {
  s0 = f32[] parameter(0)
  a0 = s32[] parameter(1)
  s1 = f32[] parameter(2)
  a1 = s32[] parameter(3)
  ROOT t = (f32[], s32[]) tuple(s1, a1)
}
ENTRY e {
  o1 = f32[8,5] parameter(0)
  o2 = s32[8,5] parameter(1)
  i = s32[4,1] parameter(2)
  u1 = f32[4,2,3] parameter(3)
  u2 = s32[4,1,3] parameter(4)
  ROOT s = (f32[8,5], s32[8,5]) scatter(o1, o2, i, u1, u2), update_window_dims={1,2},
      inserted_window_dims={}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,
      to_apply=combine
}
"""


def test_scatter_updates_of_different_shapes_are_refused():
    module = parser.parse_module(_SCATTER_UNEQUAL_UPDATES)
    with pytest.raises(VerifierError, match=r"(?s)`%s = .*all updates must have the same "
                       r"dimensions, got f32\[4,2,3\].*s32\[4,1,3\]"):
        verify_module(module)
