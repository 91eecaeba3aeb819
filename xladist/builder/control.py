"""Control flow, calls, custom calls, tokens, feeds, channels and random numbers."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from ..hlo.ir import Computation
from ..hlo.lexer import quote
from ..hlo.shape import Shape
from .core import BuilderError, XlaOp, as_shape

RNG_ALGORITHMS = ("rng_default", "rng_three_fry", "rng_philox")
API_VERSIONS = ("API_VERSION_ORIGINAL", "API_VERSION_STATUS_RETURNING",
                "API_VERSION_STATUS_RETURNING_UNIFIED", "API_VERSION_TYPED_FFI")


def _pairs_text(pairs) -> str:
    return "{" + ",".join("{" + f"{int(a)},{int(b)}" + "}" for a, b in pairs) + "}"


class ControlMixin:
    # ---- loops ----------------------------------------------------------------
    def while_loop(self, cond, body, init) -> XlaOp:
        """XLA While. `cond`/`body` are Computations or callables.

        With `init` a list/tuple of values, the state is their HLO tuple and callables get
        the elements: `cond(sb, *state) -> pred[]`, `body(sb, *state) -> list of new
        values`. With a single XlaOp they get that one value. The result is the while op
        (a tuple for list state: unpack it with `a, b = loop`).
        """
        unpack = isinstance(init, (list, tuple))
        state = self.tuple(*init) if unpack else self._coerce(init)
        shape = state.shape

        def as_state(fn):
            if not callable(fn) or isinstance(fn, Computation) or not unpack:
                return fn

            @functools.wraps(fn)  # its signature is checked (BuilderCore._check_callable)
            def wrapped(sb, *values):
                out = fn(sb, *values)
                if isinstance(out, XlaOp) and not out.shape.is_tuple:
                    out = [out]  # one-element state returned bare
                return out
            return wrapped

        cond_c = self._computation(cond, [shape], "cond", unpack=unpack, op="while")
        body_c = self._computation(as_state(body), [shape], "body", unpack=unpack, op="while")
        return self._add("while", [state], {"condition": cond_c, "body": body_c})

    def fori_loop(self, lower, upper, body, init: Sequence[XlaOp]) -> list[XlaOp]:
        """for i in [lower, upper): state = body(sb, i, *state). Returns the final state.

        Bounds are Python ints (s32) or XlaOps of one integer type; the upper bound rides
        in the loop state so an XlaOp bound is visible inside the loop's computations.
        """
        init = [self._coerce(v) for v in init]
        lo = self._coerce(lower, like=upper if isinstance(upper, XlaOp) else None) \
            if isinstance(lower, XlaOp) or isinstance(upper, XlaOp) \
            else self.constant_r0(int(lower), "s32")
        hi = self._coerce(upper, like=lo)
        self._check_callable(body, [lo.shape, *(v.shape for v in init)],
                             f"fori_loop in computation {self.name}: body")

        def cond(sb, i, n, *state):
            return sb.lt(i, n)

        def step(sb, i, n, *state):
            new = body(sb, i, *state)
            new = [new] if isinstance(new, XlaOp) else list(new)
            return [i + 1, n, *new]

        loop = self.while_loop(cond, step, [lo, hi, *init])
        return list(loop)[2:]

    # ---- calls and conditionals ---------------------------------------------------
    def call(self, computation, operands: Sequence[XlaOp] = ()) -> XlaOp:
        """Call a Computation (or a callable `fn(sb, *params)`) on operands."""
        operands = [self._coerce(o) for o in operands]
        comp = self._computation(computation, [o.shape for o in operands], "callee", op="call")
        return self._add("call", operands, {"to_apply": comp})

    def conditional(self, index_or_pred: XlaOp, branches: Sequence, operands) -> XlaOp:
        """XLA Conditional. With a pred selector, branches are [true_branch, false_branch];
        with an s32 index, branch i runs (out-of-range indices run the last branch).

        `operands` is one value passed to every branch or a list with one per branch;
        branch callables receive (sb, operand).
        """
        index_or_pred = self._operand(index_or_pred, "conditional")
        branches = list(branches)
        if isinstance(operands, (list, tuple)):
            ops = list(operands)
            if len(ops) != len(branches):
                raise BuilderError(f"conditional: {len(branches)} branches but {len(ops)} "
                                   "operands; give one operand per branch")
        else:
            ops = [operands] * len(branches)
        comps = [self._computation(fn, [op.shape], f"branch_{k}", op="conditional")
                 for k, (fn, op) in enumerate(zip(branches, ops))]
        if index_or_pred.element_type.kind == "pred":
            if len(branches) != 2:
                raise BuilderError("conditional with a pred selector takes exactly 2 branches "
                                   f"[true, false], got {len(branches)}")
            attrs = {"true_computation": comps[0], "false_computation": comps[1]}
        else:
            attrs = {"branch_computations": comps}
        return self._add("conditional", [index_or_pred, *ops], attrs)

    def custom_call(self, target: str, operands: Sequence[XlaOp], shape, *,
                    has_side_effect: bool = False, backend_config: str | None = None,
                    api_version: str | None = None, operand_layouts=None,
                    called_computations: Sequence[Computation] = ()) -> XlaOp:
        """A custom-call of `target` with the given result shape."""
        attrs = {"custom_call_target": target,
                 "custom_call_has_side_effect": True if has_side_effect else None,
                 "operand_layout_constraints": tuple(as_shape(s).with_default_layouts()
                                                     for s in operand_layouts)
                 if operand_layouts is not None else None,
                 "called_computations": list(called_computations) or None}
        if api_version is not None:
            v = api_version.upper()
            if not v.startswith("API_VERSION_"):
                v = "API_VERSION_" + v
            if v not in API_VERSIONS:
                raise BuilderError(f"custom_call api_version {api_version!r} is not one of "
                                   f"{API_VERSIONS}")
            attrs["api_version"] = None if v == "API_VERSION_ORIGINAL" else v
        op = self._add("custom-call", list(operands), attrs, declared=as_shape(shape))
        if backend_config is not None:
            # Kept as the string it is: the printer writes it raw only where XLA would (one
            # brace dict, printer._is_brace_dict), so '{' alone or '{a' stays quoted.
            op.instruction.backend_config = quote(backend_config)
        return op

    def optimization_barrier(self, operand: XlaOp) -> XlaOp:
        """`opt-barrier`: an identity the compiler may not move computation across."""
        return self._add("opt-barrier", [operand])

    # ---- tokens and feeds -----------------------------------------------------------
    def after_all(self, *tokens: XlaOp) -> XlaOp:
        """Join tokens; with none, create a fresh token (XLA CreateToken)."""
        if len(tokens) == 1 and isinstance(tokens[0], (list, tuple)):
            tokens = tuple(tokens[0])
        return self._add("after-all", list(tokens))

    create_token = after_all

    def add_dependency(self, operand: XlaOp, token: XlaOp) -> XlaOp:
        return self._add("add-dependency", [operand, token])

    def infeed(self, shape, token: XlaOp | None = None, config: str = "") -> XlaOp:
        """Next value of this device's infeed: returns the tuple (data, token)."""
        data = as_shape(shape).with_default_layouts()
        token = token if token is not None else self.after_all()
        return self._add("infeed", [token], {"infeed_config": config or None},
                         declared=Shape.tuple_of([data, Shape.token()]))

    def outfeed(self, operand: XlaOp, token: XlaOp | None = None, config: str = "") -> XlaOp:
        """Send `operand` to this device's outfeed; returns the new token."""
        operand = self._operand(operand, "outfeed")
        token = token if token is not None else self.after_all()
        return self._add("outfeed", [operand, token],
                         {"outfeed_shape": operand.shape.with_default_layouts(),
                          "outfeed_config": config or None},
                         declared=Shape.token())

    # ---- channels --------------------------------------------------------------------
    def _channel_attrs(self, channel_id, is_host_transfer):
        if channel_id is None:
            raise BuilderError("send/recv need a channel_id (builder.next_channel_id() "
                               "gives a fresh one); the matching send and recv share it")
        return {"channel_id": int(channel_id),
                "is_host_transfer": True if is_host_transfer else None}

    def _peer_attrs(self, op: XlaOp, source_target_pairs):
        if source_target_pairs is not None:
            op.instruction.frontend_attributes["_xla_send_recv_source_target_pairs"] = \
                _pairs_text(source_target_pairs)
        return op

    def send(self, operand: XlaOp, token: XlaOp, channel_id: int, *,
             is_host_transfer: bool = False, source_target_pairs=None) -> XlaOp:
        """Start sending `operand`; returns (data, u32[], token[]) for send_done.
        `source_target_pairs` (device ids) name the peers of a device-to-device channel."""
        operand = self._operand(operand, "send")
        declared = Shape.tuple_of([operand.shape, Shape.scalar("u32"), Shape.token()])
        op = self._add("send", [operand, token],
                       self._channel_attrs(channel_id, is_host_transfer), declared=declared)
        return self._peer_attrs(op, source_target_pairs)

    def send_done(self, send: XlaOp) -> XlaOp:
        send = self._operand(send, "send-done")
        a = send.instruction.attrs
        return self._add("send-done", [send], {"channel_id": a.get("channel_id"),
                                               "is_host_transfer": a.get("is_host_transfer")},
                         declared=Shape.token())

    def recv(self, shape, token: XlaOp, channel_id: int, *, is_host_transfer: bool = False,
             source_target_pairs=None) -> XlaOp:
        """Start receiving a value of `shape`; returns (data, u32[], token[]) for recv_done."""
        data = as_shape(shape).with_default_layouts()
        declared = Shape.tuple_of([data, Shape.scalar("u32"), Shape.token()])
        op = self._add("recv", [token], self._channel_attrs(channel_id, is_host_transfer),
                       declared=declared)
        return self._peer_attrs(op, source_target_pairs)

    def recv_done(self, recv: XlaOp) -> XlaOp:
        """(data, token) of a finished recv."""
        recv = self._operand(recv, "recv-done")
        a = recv.instruction.attrs
        data = recv.shape.tuple_shapes[0]
        return self._add("recv-done", [recv], {"channel_id": a.get("channel_id"),
                                               "is_host_transfer": a.get("is_host_transfer")},
                         declared=Shape.tuple_of([data, Shape.token()]))

    # ---- random numbers ----------------------------------------------------------------
    def rng_uniform(self, a, b, shape) -> XlaOp:
        """Uniform in [a, b) with the element type of a/b and the dims of `shape`."""
        a = self._coerce(a)
        b = self._coerce(b, like=a)
        s = self._rng_shape(shape, a)
        return self._add("rng", [a, b], {"distribution": "rng_uniform"}, declared=s)

    def rng_normal(self, mu, sigma, shape) -> XlaOp:
        mu = self._coerce(mu)
        sigma = self._coerce(sigma, like=mu)
        s = self._rng_shape(shape, mu)
        return self._add("rng", [mu, sigma], {"distribution": "rng_normal"}, declared=s)

    def _rng_shape(self, shape, like: XlaOp) -> Shape:
        if isinstance(shape, (list, tuple)) and all(isinstance(d, int) for d in shape):
            return Shape.array(like.element_type, shape)
        return as_shape(shape)

    def rng_bit_generator(self, algorithm: str, initial_state: XlaOp, shape) -> XlaOp:
        """(new state, random bits of `shape`); algorithm: default, three_fry, philox."""
        alg = algorithm.lower()
        if not alg.startswith("rng_"):
            alg = "rng_" + alg
        if alg not in RNG_ALGORITHMS:
            raise BuilderError(f"rng_bit_generator algorithm {algorithm!r} is not one of "
                               f"{RNG_ALGORITHMS}")
        initial_state = self._operand(initial_state, "rng-bit-generator")
        declared = Shape.tuple_of([initial_state.shape, as_shape(shape)])
        return self._add("rng-bit-generator", [initial_state], {"algorithm": alg},
                         declared=declared)
