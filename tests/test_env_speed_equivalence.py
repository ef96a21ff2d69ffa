"""The fast paths of the distilled environment against reference computations.

Every speed-up in s3.rl.env, s3.task.layout, s3.tracks.torch_track and the dynamics families
(chunked no-grad forwards, the hand-written GRU, the component-wise RK4, sliding history windows,
window/extended gather tables, fmod-free wraps, index_select gathers) must give what the plain
formulation gives: the references below are the straightforward code these paths replaced.
Tolerance 1e-5 (absolute, float32); most are bit for bit. One torch thread, CPU, a few seconds.
"""

from __future__ import annotations

import math
import pickle

import pytest
import torch
import torch.nn.functional as F

from s3.dynamics.base import DynamicsModel
from s3.dynamics.ddm import INFERENCE_CHUNK as DDM_CHUNK
from s3.dynamics.ddm import DDMModel
from s3.dynamics.dytr import DyTrModel
from s3.dynamics.single_track import G, SingleTrack, _pacejka, coeff_bounds
from s3.dynamics.transformer import INFERENCE_CHUNK as TR_CHUNK
from s3.dynamics.transformer import TransformerModel, history_tokens
from s3.rl.env import DistilledEnv
from s3.task.layout import assemble, to_body
from s3.task.observation import Observer
from s3.task.params import EnvParams
from s3.tracks.generate import procedural_track
from s3.tracks.torch_track import TrackBatch, gather_rows, remainder_near
from s3.tracks.track import FrictionPatch

torch.set_num_threads(1)
TOL = 1e-5


def assert_close(got: torch.Tensor, ref: torch.Tensor, tol: float = TOL) -> None:
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert (got.float() - ref.float()).abs().max().item() <= tol


# ---------------------------------------------------------------------------- dynamics models
def reference_derivs(st: SingleTrack, x, a, c, mu, lf, lr) -> torch.Tensor:
    """The original derivative on [N, 4] states, every term recomputed at every call."""
    vx, vy, r, d = x.unbind(1)
    steer_cmd, thr, brk = a.unbind(1)
    bf, cf, df, ef, br, cr, dr_, er, cm1, cm2, cr0, cr2, cb, iz, sg, stau = c.unbind(1)
    wb = lf + lr
    u = vx.abs().clamp(min=st.v_lo)
    fy_f = df * mu * (G * lr / wb) * _pacejka(d - torch.atan2(vy + lf * r, u), bf, cf, ef)
    fy_r = dr_ * mu * (G * lf / wb) * _pacejka(-torch.atan2(vy - lr * r, u), br, cr, er)
    amax = (mu * G * (df * lr + dr_ * lf) / wb).clamp(min=0.05)
    ax = (torch.relu(cm1 - cm2 * vx) * thr - cb * brk * torch.tanh(vx / 0.3)) / amax
    ax = amax * torch.tanh(ax) - cr0 * torch.tanh(vx / 0.5) - cr2 * vx * vx.abs()
    cd, sd = torch.cos(d), torch.sin(d)
    dvx = ax - fy_f * sd + vy * r
    dvy_dyn = fy_r + fy_f * cd - vx * r
    dr_dyn = (lf * fy_f * cd - lr * fy_r) / (iz * lf * lr)
    td = torch.tan(d)
    lam = ((vx.abs() - st.v_lo) / (st.v_hi - st.v_lo)).clamp(0.0, 1.0)
    dvy = lam * dvy_dyn + (1 - lam) * (vx * td * lr / wb - vy) / 0.05
    dr = lam * dr_dyn + (1 - lam) * (vx * td / wb - r) / 0.05
    dd = (sg * steer_cmd - d) / stau
    return torch.stack([dvx, dvy, dr, dd], dim=1)


def reference_single_track(
    st: SingleTrack, x: torch.Tensor, a: torch.Tensor, c: torch.Tensor, mu: torch.Tensor
) -> torch.Tensor:
    """The original RK4 on [N, 4] states."""
    c = c.expand(x.shape[0], -1) if c.dim() == 1 else c
    h, g = st.dt / st.substeps, st.geometry()
    for _ in range(st.substeps):
        k1 = reference_derivs(st, x, a, c, mu, *g)
        k2 = reference_derivs(st, x + 0.5 * h * k1, a, c, mu, *g)
        k3 = reference_derivs(st, x + 0.5 * h * k2, a, c, mu, *g)
        k4 = reference_derivs(st, x + h * k3, a, c, mu, *g)
        x = x + (h / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
    return x


def random_inputs(n: int, k: int = 10, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    hs = torch.randn(n, k, 4, generator=g) * torch.tensor([6.0, 1.0, 0.5, 0.1]) + torch.tensor([12.0, 0.0, 0.0, 0.0])
    ha = torch.rand(n, k, 3, generator=g) * torch.tensor([2.0, 1.0, 1.0]) - torch.tensor([1.0, 0.0, 0.0])
    a = torch.rand(n, 3, generator=g) * torch.tensor([2.0, 1.0, 1.0]) - torch.tensor([1.0, 0.0, 0.0])
    mu = 0.2 + torch.rand(n, generator=g)
    return hs, ha, a, mu


def test_single_track_components_match_the_stacked_formulation() -> None:
    st = SingleTrack(2.6, 1.3, 0.1, substeps=2)
    lo, hi = coeff_bounds()
    hs, _, a, mu = random_inputs(700)
    g = torch.Generator().manual_seed(1)
    x = hs[:, -1].clone()
    x[:50, 0] = torch.linspace(-1.0, 3.5, 50)  # the low-speed blend
    c = lo + (hi - lo) * torch.rand(700, len(lo), generator=g)
    assert torch.equal(st(x, a, c, mu), reference_single_track(st, x, a, c, mu))
    c1 = lo + (hi - lo) * torch.rand(len(lo), generator=g)  # one coefficient set for all (dytr)
    assert_close(st(x, a, c1, mu), reference_single_track(st, x, a, c1, mu))
    assert torch.equal(st.derivs(x, a, c, mu, *st.geometry()), reference_derivs(st, x, a, c, mu, *st.geometry()))
    c.requires_grad_(True)
    st(x, a, c, mu).sum().backward()  # still differentiable (training uses the same code)
    assert c.grad is not None and torch.isfinite(c.grad).all()


def perturbed(model: DynamicsModel, seed: int = 0) -> DynamicsModel:
    """Random weights everywhere (the heads start at zero, which would hide the networks)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model.eval()


def test_ddm_no_grad_gru_matches_torch_gru() -> None:
    model = perturbed(DDMModel(history=10, dt=0.1, use_mu=True))
    n = DDM_CHUNK + 333  # two chunks, the last one ragged
    hs, ha, a, mu = random_inputs(n)
    tokens = history_tokens(model, hs, ha, a, mu)
    with torch.inference_mode():
        ref_h = model.gru(tokens)[1][0]
        assert_close(model._gru_last(tokens), ref_h, 2e-6)
        fast = model.step(hs, ha, a, mu)
    with torch.no_grad(), torch.enable_grad():  # the training path: nn.GRU and nn.Tanh, one batch
        ref = model.step(hs, ha, a, mu)
    assert_close(fast, ref)


def reference_transformer(
    model: TransformerModel | DyTrModel, tokens: torch.Tensor, extra_last: torch.Tensor | None
) -> torch.Tensor:
    """The original forward: one batch, every block's full q, k, v, SDPA, the last token's output."""
    net = model.net
    x = net.embed(tokens) + net.pos[: tokens.shape[1]]
    if extra_last is not None:
        x = torch.cat([x[:, :-1], x[:, -1:] + extra_last[:, None]], dim=1)
    for i, blk in enumerate(net.blocks):
        n, _, d = x.shape
        q, k, v = blk.qkv(blk.ln1(x)).split(d, dim=2)
        heads = lambda y, n=n, h=blk.heads, d=d: y.reshape(n, -1, h, d // h).transpose(1, 2)
        if i == len(net.blocks) - 1:
            x, y = x[:, -1:], F.scaled_dot_product_attention(heads(q[:, -1:]), heads(k), heads(v))
        else:
            y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + blk.proj(y.transpose(1, 2).reshape(n, -1, d))
        x = x + blk.mlp(blk.ln2(x))
    return net.ln_f(x[:, -1])


@pytest.mark.parametrize("family", ["transformer", "dytr"])
def test_transformer_chunks_and_last_query_match_the_plain_forward(family: str) -> None:
    model = perturbed(TransformerModel(10, 0.1, True) if family == "transformer" else DyTrModel(10, 0.1, True))
    n = 2 * TR_CHUNK + 45
    hs, ha, a, mu = random_inputs(n, seed=2)
    with torch.no_grad():
        tokens = history_tokens(model, hs, ha, a, mu)
        if family == "transformer":
            z = model.head(reference_transformer(model, tokens, None))
            ref = hs[:, -1] + z * model.norm.delta_std + model.norm.delta_mean
        else:
            s0 = hs[:, -1]
            prior = model.prior(s0, a, model.prior_coefficients(), mu)
            extra = model.prior_embed((prior - s0 - model.norm.delta_mean) / model.norm.delta_std)
            ref = prior + model.head(reference_transformer(model, tokens, extra)) * model.norm.delta_std
    with torch.inference_mode():
        assert_close(model.step(hs, ha, a, mu), ref)  # chunked
    with torch.no_grad(), torch.enable_grad():
        assert_close(model.step(hs, ha, a, mu), ref)  # the training path: one batch


def test_bf16_is_an_opt_in_setting() -> None:
    model = perturbed(TransformerModel(10, 0.1, True), seed=3)
    hs, ha, a, mu = random_inputs(300, seed=3)
    assert DynamicsModel.inference_bf16 is False and model.inference_bf16 is False
    with torch.inference_mode():
        exact = model.step(hs, ha, a, mu)
        model.inference_bf16 = True
        fast = model.step(hs, ha, a, mu)
    assert fast.dtype == torch.float32 and torch.isfinite(fast).all()
    assert 0 < ((fast - exact) / model.norm.delta_std).abs().max() < 0.5  # bf16 rounding, not a bug


@pytest.mark.slow  # ~20 s of torch.compile; nightly (make test-all)
def test_compile_is_an_opt_in_setting_that_matches_eager(tracks) -> None:
    model = perturbed(DyTrModel(10, 0.1, True), seed=4)
    n = TR_CHUNK + 45  # one compiled chunk, an eager remainder
    hs, ha, a, mu = random_inputs(n, seed=4)
    assert DynamicsModel.inference_compile is False and EnvParams().compile_model is False
    with torch.inference_mode():
        exact = model.step(hs, ha, a, mu)
        model.inference_compile = True
        assert_close(model.step(hs, ha, a, mu), exact)
    assert model.net._compiled is not None and model.net._compiled != model.net._forward
    clone = pickle.loads(pickle.dumps(model))  # e.g. to a worker process: without the compiled function
    assert clone.net._compiled is None and clone.inference_compile
    with torch.inference_mode():
        assert_close(clone.step(hs, ha, a, mu), exact)
    with torch.no_grad(), torch.enable_grad():  # training never goes through the compiled graph
        assert_close(model.step(hs, ha, a, mu), exact)

    def broken(*args: object) -> torch.Tensor:
        raise RuntimeError("no C++ compiler")

    model.net._compiled = broken  # what a failed inductor build looks like at the first call
    with torch.inference_mode(), pytest.warns(UserWarning, match="no C.. compiler"):
        assert_close(model.step(hs, ha, a, mu), exact)
    assert model.net._compiled == model.net._forward  # eager from then on
    env = DistilledEnv(model, tracks, EnvParams(num_envs=8, compile_model=False), seed=0)
    assert model.inference_compile is False
    DistilledEnv(model, tracks, EnvParams(num_envs=8, compile_model=True), seed=0)
    assert model.inference_compile is True and env.model is model


def test_compiled_kernels_do_not_depend_on_the_thread_count() -> None:
    """Inductor's kernels are built single-threaded (cpp.threads = 1): the same numbers with 2 torch
    threads as with 1. Built for 2 threads, dytr's attention reductions opened an OpenMP region per
    row and ran 6x slower than on 1 thread, with other rounding."""
    model = perturbed(DyTrModel(10, 0.1, True), seed=5)
    hs, ha, a, mu = random_inputs(TR_CHUNK, seed=5)
    model.inference_compile = True
    with torch.inference_mode():
        one = model.step(hs, ha, a, mu)
    clone = pickle.loads(pickle.dumps(model))  # compiles afresh, now with 2 threads
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with torch.inference_mode():
            two = clone.step(hs, ha, a, mu)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)


# ---------------------------------------------------------------------------- tracks
@pytest.fixture(scope="module")
def batch() -> TrackBatch:
    ice = (
        FrictionPatch(50.0, 120.0, -6.0, 0.5, 0.2),
        FrictionPatch(100.0, 140.0, 0.0, 6.0, 0.5),
        FrictionPatch(600.0, 30.0, -9.0, 9.0, 0.3),
    )
    return TrackBatch([procedural_track(1).with_patches(ice), procedural_track(2), procedural_track(3)], ds=1.0)


def test_remainder_near_is_remainder() -> None:
    g = torch.Generator().manual_seed(0)
    p = 10.0 + 1000.0 * torch.rand(5000, generator=g)
    x = (3.0 * torch.rand(5000, generator=g) - 1.0) * p  # [-p, 2p)
    x[:4] = torch.stack([-p[0], torch.zeros(()), p[2], torch.nextafter(2 * p[3], torch.zeros(()))])
    assert torch.equal(remainder_near(x, p), torch.remainder(x, p))
    a = (3.0 * torch.rand(5000, generator=g) - 1.0) * 2 * math.pi  # a Python float period, as for angles
    two_pi = torch.tensor(2 * math.pi)  # the period as float32, as the ops see it
    a[:3] = torch.stack([-two_pi, two_pi, torch.nextafter(2 * two_pi, torch.zeros(()))])
    assert torch.equal(remainder_near(a, 2 * math.pi), torch.remainder(a, 2 * math.pi))


def test_gather_rows_is_index_select() -> None:
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 500, (3000,), generator=g)
    for f in (1, 2, 3, 4):
        table = torch.randn(500, f, generator=g)
        assert torch.equal(gather_rows(table, idx), table.index_select(0, idx))
    double = torch.randn(500, 2, dtype=torch.float64, generator=g)
    assert torch.equal(gather_rows(double, idx), double.index_select(0, idx))


def reference_friction(tb: TrackBatch, track_idx: torch.Tensor, s: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """The original friction lookup: advanced indexing of the patch table, torch.remainder."""
    p = tb.patches[track_idx]  # [N, P, 5]
    length = tb.length[track_idx].unsqueeze(1)
    s, d = s.unsqueeze(1), d.unsqueeze(1)
    inside = (
        tb.patch_valid[track_idx]
        & (torch.remainder(s - p[..., 0], length) <= p[..., 1])
        & (d >= p[..., 2])
        & (d <= p[..., 3])
    )
    last = (inside.long() * torch.arange(1, p.shape[1] + 1)).max(dim=1).values
    mu = p[..., 4].gather(1, (last - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    return torch.where(last > 0, mu, tb.base_mu[track_idx])


def test_friction_matches_the_original_lookup(batch: TrackBatch) -> None:
    g = torch.Generator().manual_seed(0)
    n = 4000
    ti = torch.randint(0, len(batch), (n,), generator=g)
    length = batch.length[ti]
    s = torch.rand(n, generator=g) * length
    s[:3] = torch.stack([torch.zeros(()), length[1], batch.patches[ti[2], 0, 0]])  # lap ends, a patch edge
    d = 20.0 * torch.rand(n, generator=g) - 10.0
    assert torch.equal(batch.friction_sd(ti, s, d, on_lap=True), reference_friction(batch, ti, s, d))
    ahead = s[:, None] + torch.tensor([0.0, 5.0, 50.0, 700.0])  # past the lap end: no longer on_lap
    got = batch.friction_sd(ti, ahead, d[:, None])
    ref = reference_friction(batch, ti.repeat_interleave(4), ahead.reshape(-1), d.repeat_interleave(4)).view(n, 4)
    assert torch.equal(got, ref)
    assert (got < 1.0).any() and (got == 1.0).any()


def test_window_and_extended_tables_follow_the_lap(batch: TrackBatch) -> None:
    values = torch.arange(batch.mmax * len(batch), dtype=torch.float32)
    table, stride = batch.windows(values, 3, 7)
    ext, ext_stride = batch.extended(values, 40)
    for b in range(len(batch)):
        cnt = int(batch.count[b])
        for i in (0, 1, cnt // 2, cnt - 2, cnt - 1):
            want = b * batch.mmax + torch.remainder(torch.arange(i - 3, i + 4), cnt)
            assert torch.equal(table[b * stride + i], want.float())
            assert ext[b * ext_stride + i + 39] == b * batch.mmax + (i + 39) % cnt


# ---------------------------------------------------------------------------- environment
class ToyCar(DynamicsModel):
    """A small kinematic car (no fitted coefficients): steering lag, throttle/brake, yaw from steer."""

    family = "toy"

    def __init__(self, history: int = 6) -> None:
        super().__init__(history, 0.1, use_mu=False)

    def forward_step(self, hs, ha, a, mu):
        vx, d = hs[:, -1, 0], hs[:, -1, 3]
        d1 = 0.6 * d + 0.15 * a[:, 0]
        vx1 = vx + self.dt * (4.0 * a[:, 1] - 8.0 * a[:, 2] * torch.tanh(vx / 0.3) - 0.3 * torch.tanh(vx / 0.5))
        r = vx1 * torch.tan(d1) / 2.6
        return torch.stack([vx1, 0.4 * r, r, d1], dim=1)


@pytest.fixture(scope="module")
def tracks() -> list:
    ice = (FrictionPatch(30.0, 200.0, -8.0, 8.0, 0.3),)
    return [procedural_track(0).with_patches(ice), procedural_track(1), procedural_track(2)]


def reference_preview(env: DistilledEnv) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The original preview: wrapped point indices, then (x, y) + t (vx, vy) and the widths."""
    tb, n = env.tracks, env.num_envs
    cnt = tb.count[env.track_idx][:, None]
    idx = env.frame.seg[:, None] + env.frame._preview_offs[env.track_idx]
    idx = torch.where(idx >= cnt, idx - cnt, idx)
    flat = (idx + (env.track_idx * tb.mmax)[:, None]).reshape(-1)
    xy = tb.xy[flat] + env.frame.seg_t[:, None].expand(-1, idx.shape[1]).reshape(-1, 1) * tb.seg[flat]
    return xy.view(n, -1, 2), tb.w_left[flat].view(n, -1), tb.w_right[flat].view(n, -1)


def reference_assemble(hist, track_feats, body, wl, wr, surface) -> torch.Tensor:
    n = hist.shape[0]
    parts = [
        hist[:, -1],
        hist[:, :-1].flip(1).reshape(n, -1),
        track_feats,
        body.reshape(n, -1),
        torch.stack([wl, wr], dim=2).reshape(n, -1),
    ]
    return torch.cat(parts + ([] if surface is None else [surface]), dim=1)


def test_history_windows_preview_and_observation_match_the_plain_code(tracks) -> None:
    env = DistilledEnv(ToyCar(), tracks, EnvParams(num_envs=24, surface_label=True), seed=0)
    g = torch.Generator().manual_seed(0)
    hs, ha, hist = env.hs.clone(), env.ha.clone(), env.hist.clone()
    with torch.inference_mode():
        for step in range(90):  # past one compaction of every window (64 spare rows)
            td, _, dones, _ = env.step(torch.rand(24, 2, generator=g) * 2 - 1)
            keep = ~dones[:, None, None]
            # the windows roll like torch.cat([h[:, 1:], new], 1); finished cars restart as a whole window
            hs = torch.where(keep, torch.cat([hs[:, 1:], env.hs[:, -1:]], 1), env.hs)
            ha = torch.where(keep, torch.cat([ha[:, 1:], env.ha[:, -1:]], 1), env.ha)
            hist = torch.where(keep, torch.cat([hist[:, 1:], env.hist[:, -1:]], 1), env.hist)
            assert torch.equal(env.hs, hs) and torch.equal(env.ha, ha) and torch.equal(env.hist, hist), step
            assert torch.equal(
                env.hist[:, :, :4], env.hs[:, -env.hist.shape[1] :]
            )  # the same states (K = 6 > H + 1 = 5)
            if step % 15 == 0:
                xy, wl, wr = reference_preview(env)
                got_xy, got_w = env.frame.preview()
                assert torch.equal(got_xy, xy) and torch.equal(got_w[..., 0], wl) and torch.equal(got_w[..., 1], wr)
                q = env.frame._surface_d.numel()
                mu_ahead = reference_friction(
                    env.tracks,
                    env.track_idx.repeat_interleave(q),
                    (env.frame.s[:, None] + env.frame._surface_d).reshape(-1),
                    env.track_feats[:, 0].repeat_interleave(q),
                ).view(-1, q)
                surface = torch.cat([env.frame.mu[:, None], mu_ahead], dim=1)
                ref = reference_assemble(env.hist, env.track_feats, to_body(xy, env.pose), wl, wr, surface)
                assert torch.equal(td["policy"], ref) and torch.equal(
                    assemble(env.hist, env.track_feats, to_body(xy, env.pose), wl, wr, surface), ref
                )
                assert torch.equal(
                    env.frame.mu, reference_friction(env.tracks, env.track_idx, env.frame.s, env.track_feats[:, 0])
                )
        assert dones.any() or env.episode_count > 0


def test_projection_across_the_start_line_matches_trackbatch(tracks) -> None:
    env = DistilledEnv(ToyCar(), tracks, EnvParams(num_envs=8), seed=0)
    tb, w = env.tracks, env.params.projection_window
    ti = torch.tensor([0, 0, 1, 1, 2, 2, 0, 1])
    cnt = tb.count[ti]
    hint = torch.stack(
        [
            torch.tensor(0),
            cnt[1] - 1,
            torch.tensor(2),
            cnt[3] - 3,
            torch.tensor(w),
            cnt[5] - w - 1,
            torch.tensor(1),
            cnt[7] // 2,
        ]
    )
    ahead = torch.tensor([2, 3, -3, 4, -2, 5, -1, 0])  # the cars are a few points from their hints
    s = tb.s_pts[ti * tb.mmax + torch.remainder(hint + ahead, cnt)] + 0.4
    d = torch.tensor([0.0, 1.0, -2.0, 3.0, -1.0, 0.5, 2.0, -3.0])
    x, y, h = tb.pose_at(ti, s, d)
    ours = env.frame.project(torch.stack([x, y], 1), ti, hint, h + 0.2)
    ref = tb.project(torch.stack([x, y], 1), ti, hint=hint, window=w, yaw=h + 0.2)
    assert torch.equal(ours.segment, ref.segment)
    for name in ("s", "d", "heading", "heading_error", "w_left", "w_right"):
        assert_close(getattr(ours, name), getattr(ref, name), 1e-4)


def test_observation_builder_history_accepts_row_writes(tracks) -> None:
    """source_env writes observer.hist[...] directly (its inactive cars): the window must take it."""
    builder = Observer.for_params(tracks, EnvParams(), num_cars=4)
    x, y, h = builder.frame.tracks.pose_at(torch.arange(3).repeat(2)[:4], torch.full((4,), 20.0))
    pose = torch.stack([x, y, h], 1)
    state, cmd = torch.rand(4, 4), torch.rand(4, 3)
    builder.start(torch.arange(4), torch.arange(3).repeat(2)[:4], pose, state, cmd)
    with torch.inference_mode():
        row = torch.arange(7.0)
        builder.hist[torch.tensor([1, 3])] = row.expand(2, builder.hist.shape[1], -1)
        ref = builder.hist.clone()
        for k in range(70):  # past a compaction
            new_state, new_cmd = torch.full((4, 4), float(k)), torch.full((4, 3), -float(k))
            builder.observe(pose, new_state, new_cmd)
            ref = torch.cat([ref[:, 1:], torch.cat([new_state, new_cmd], 1)[:, None]], 1)
            assert torch.equal(builder.hist, ref)
    assert torch.equal(builder.compute()[:, :7], torch.cat([new_state, new_cmd], 1))
