# ruff: noqa: E501  (HLO text lines are long)
"""seqjax.op_profile: HLO op names and the grouping of a real profiler trace."""

import jax
import jax.numpy as jnp
import pytest

from seqjax import op_profile

HLO = """\
HloModule jit_f

%fused_computation (param_0: f32[8,8], param_1: f32[8,8]) -> f32[8,8] {
  %param_0 = f32[8,8]{1,0} parameter(0)
  %param_1 = f32[8,8]{1,0} parameter(1)
  ROOT %dot.1 = f32[8,8]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused_copy (param_0.1: f32[8,8]) -> f32[8,8] {
  %param_0.1 = f32[8,8]{1,0} parameter(0)
  ROOT %copy.5 = f32[8,8]{1,0} copy(%param_0.1)
}

%body (p: (s32[], f32[8,8])) -> (s32[], f32[8,8]) {
  %p = (s32[], f32[8,8]) parameter(0)
  %gte.0 = f32[8,8]{1,0} get-tuple-element(%p), index=1, metadata={op_name="jit(f)/outer/while/body/slice"}
  %exp.1 = f32[8,8]{1,0} exponential(%gte.0), metadata={op_name="jit(f)/outer/while/body/inner/exp"}
  %ynn_fusion = f32[8,8]{1,0} fusion(%exp.1, %gte.0), kind=kCustom, calls=%fused_computation
  ROOT %t = (s32[], f32[8,8]) tuple(%gte.0, %ynn_fusion)
}

ENTRY %main (x: f32[8,8]) -> f32[8,8] {
  %x = f32[8,8]{1,0} parameter(0)
  %copy.2 = f32[8,8]{1,0} copy(%x), metadata={op_name="jit(f)/pre/copy"}
  %copy_fusion = f32[8,8]{1,0} fusion(%copy.2), kind=kLoop, calls=%fused_copy
  %while.3 = (s32[], f32[8,8]) while(%copy_fusion), condition=%cond, body=%body, metadata={op_name="jit(f)/outer/while"}
  ROOT %gte.9 = f32[8,8]{1,0} get-tuple-element(%while.3), index=1
}
"""


def test_hlo_op_names_resolve_fusions_without_metadata():
    ops = op_profile.hlo_op_names(HLO)
    assert ops["exp.1"] == ("exponential", "jit(f)/outer/while/body/inner/exp")
    assert ops["while.3"][0] == "while"
    # A dot fusion that lost its metadata: its computation's shared scope + the marker.
    assert ops["ynn_fusion"] == ("fusion", "jit(f)/outer/while/body/" + op_profile.UNNAMED_DOT)
    # Without its own metadata, a fusion takes its nearest named operand's.
    assert ops["copy_fusion"] == ("fusion", "jit(f)/pre/copy")


@pytest.mark.parametrize("calls", [2])
def test_profile_groups_scopes_inside_and_outside_loops(calls):
    """Every named scope of a real trace gets time, including ops inside a scan body; the
    loop op itself is not counted twice; shares add up to 1."""

    def f(x):
        with jax.named_scope("before_loop"):
            y = jnp.tanh(x @ x)

        def body(c, _):
            with jax.named_scope("in_loop"):
                return jnp.tanh(c @ x), None

        y, _ = jax.lax.scan(body, y, None, length=4)
        return y.sum()

    x = jnp.ones((256, 256), jnp.float32) / 256
    res = op_profile.profile_ops(
        jax.jit(f), (x,), [("before", r"before_loop"), ("loop", r"in_loop")], calls=calls
    )
    assert res["groups"]["before"]["ms"] > 0 and res["groups"]["loop"]["ms"] > 0
    assert sum(g["share"] for g in res["groups"].values()) == pytest.approx(1.0)
    assert res["op_ms"] == pytest.approx(sum(g["ms"] for g in res["groups"].values()))
    assert not any(name.endswith("/while") for name, _ in res["top_ops"])
