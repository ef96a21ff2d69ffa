"""Black-box causal transformer over the history tokens, predicting the normalised state change.

Token j (j = 0..K-1) is history row t-K+1+j: (normalised state, normalised command applied from
it, normalised friction label if used). The last token carries the current state and the
command being applied, so its output predicts s[t+1] - s[t]. Only the last token's output is
needed: the final block computes its query alone (earlier blocks must run on every token).

Without autograd on CPU (an RL environment stepping thousands of cars) the batch is cut into
chunks of `INFERENCE_CHUNK` sequences: the activations of one chunk stay in the CPU's cache
instead of streaming [N, K, D] tensors through memory (and page faults) for every op. The
optional bfloat16 autocast (`DynamicsModel.inference_bf16`, off by default) trades accuracy for
speed: see base.py. `DynamicsModel.inference_compile` runs each chunk through `torch.compile`
(inductor fuses the LayerNorm, attention and GELU work around the matmuls).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from s3.catalog import TRANSFORMER
from s3.dynamics.base import DynamicsModel, step_actions

if TYPE_CHECKING:
    from s3.dynamics.params import DistillParams

INFERENCE_CHUNK = 256  # sequences per chunk in the no-grad forward (~2 MB of activations at d=64)


def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    """Scaled dot-product attention: q [N, h, Tq, dh], k and v [N, h, T, dh] -> [N, h, Tq, dh].

    Eager: torch's fused kernel. Under `torch.compile`: the plain broadcast-multiply-sum, which
    inductor fuses into a few loops; at T = K ~ 10 tokens and dh = 16 it measured ~2x faster than
    the fused CPU kernel, which is built for long sequences.
    """
    if not torch.compiler.is_compiling():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    s = (q[..., :, None, :] * k[..., None, :, :]).sum(-1) * q.shape[-1] ** -0.5  # [N, h, Tq, T]
    if causal:
        t = s.shape[-1]
        s = s.masked_fill(~torch.ones(t, t, dtype=torch.bool, device=s.device).tril(), float("-inf"))
    return (s.softmax(-1)[..., None] * v[..., None, :, :]).sum(-2)


class Block(nn.Module):
    """Pre-LayerNorm transformer block: causal self-attention + MLP."""

    def __init__(self, d: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        if d % heads:
            raise ValueError(f"d_model {d} is not divisible by heads {heads}")
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, mlp_ratio * d), nn.GELU(), nn.Linear(mlp_ratio * d, d))

    def _split_heads(self, x: Tensor) -> Tensor:
        """[N, T, D] -> [N, h, T, D/h]."""
        n, t, d = x.shape
        return x.view(n, t, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x: Tensor, last_only: bool = False) -> Tensor:
        """x [N, T, D] -> [N, T, D], or [N, 1, D] (the last token only) if last_only."""
        n, _, d = x.shape
        h = self.ln1(x)
        if last_only:  # keys and values of every token, the query of the last one only
            w, b = self.qkv.weight, self.qkv.bias
            q = F.linear(h[:, -1:], w[:d], b[:d])  # [N, 1, D]
            k, v = F.linear(h, w[d:], b[d:]).split(d, dim=2)  # [N, T, D] each
            x = x[:, -1:]
        else:
            q, k, v = self.qkv(h).split(d, dim=2)
        # the last token attends to everything: no mask needed
        y = attention(self._split_heads(q), self._split_heads(k), self._split_heads(v), causal=not last_only)
        x = x + self.proj(y.transpose(1, 2).reshape(n, -1, d))
        return x + self.mlp(self.ln2(x))


class CausalTransformer(nn.Module):
    """Token features [N, T, F] -> the last token's output features [N, D]."""

    def __init__(self, in_dim: int, d_model: int, layers: int, heads: int, mlp_ratio: int, max_len: int) -> None:
        super().__init__()
        self.embed = nn.Linear(in_dim, d_model)
        self.pos = nn.Parameter(torch.zeros(max_len, d_model))
        nn.init.normal_(self.pos, std=0.02)
        self.blocks = nn.ModuleList(Block(d_model, heads, mlp_ratio) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self._compiled: Callable[..., Tensor] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickles without the compiled function (it is rebuilt on first use)."""
        return {**self.__dict__, "_compiled": None}

    def _chunk_forward(self, compiled: bool) -> Callable[..., Tensor]:
        """`_forward`, or its `torch.compile`d version (built once; chunks share one shape)."""
        if not compiled:
            return self._forward
        if self._compiled is None:
            # single-threaded kernels: with 2 threads inductor parallelised dytr's 10-key softmax
            # reductions inside their row loops, an OpenMP region per row, 6x slower than 1 thread
            self._compiled = torch.compile(self._forward, dynamic=False, options={"cpp.threads": 1})
        return self._compiled

    def _forward(self, tokens: Tensor, extra_last: Tensor | None) -> Tensor:
        """One batch, as `forward` describes."""
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]  # [N, T, D]
        if extra_last is not None:
            x = torch.cat([x[:, :-1], x[:, -1:] + extra_last[:, None]], dim=1)
        for i, blk in enumerate(self.blocks):
            x = blk(x, last_only=i == len(self.blocks) - 1)
        return self.ln_f(x[:, -1])  # [N, D]

    def forward(
        self, tokens: Tensor, extra_last: Tensor | None = None, bf16: bool = False, compiled: bool = False
    ) -> Tensor:
        """tokens [N, T, F]; extra_last [N, D] is added to the last token's embedding.

        Inference only (no autograd): bf16 runs under bfloat16 autocast; compiled runs the chunks
        through `torch.compile`, falling back to eager (with one warning) if compiling fails.
        """
        if torch.is_grad_enabled():
            return self._forward(tokens, extra_last)
        try:
            return self._inference(tokens, extra_last, bf16, compiled)
        except Exception as e:  # a missing C++ compiler or an inductor bug must not stop an env
            if not compiled:
                raise
            warnings.warn(
                f"torch.compile of the transformer failed ({type(e).__name__}: {e}); running eager", stacklevel=2
            )
            self._compiled = self._forward
            return self._inference(tokens, extra_last, bf16, compiled)

    def _inference(self, tokens: Tensor, extra_last: Tensor | None, bf16: bool, compiled: bool) -> Tensor:
        n = tokens.shape[0]
        chunk = INFERENCE_CHUNK if tokens.device.type == "cpu" else max(n, 1)
        out = tokens.new_empty(n, self.ln_f.normalized_shape[0])
        with torch.autocast(tokens.device.type, dtype=torch.bfloat16, enabled=bf16):
            for i in range(0, n, chunk):
                sl = slice(i, i + chunk)
                fwd = self._chunk_forward(compiled and i + chunk <= n)  # a CPU remainder runs eager: one compiled shape
                out[sl] = fwd(tokens[sl], None if extra_last is None else extra_last[sl])
        return out


def history_tokens(model: DynamicsModel, hs: Tensor, ha: Tensor, a: Tensor, mu: Tensor | None) -> Tensor:
    """[N, K, S], [N, K, A], [N, A], [N] | None -> normalised tokens [N, K, S + A (+1)]."""
    parts = [model.norm.state(hs), model.norm.action(step_actions(ha, a))]
    if mu is not None:
        parts.append(model.norm.mu(mu)[:, None, None].expand(-1, hs.shape[1], 1))
    return torch.cat(parts, dim=2)


class TransformerModel(DynamicsModel):
    """s[t+1] = s[t] + denormalise(head(transformer(history tokens)))."""

    family = TRANSFORMER

    def __init__(
        self,
        history: int,
        dt: float,
        use_mu: bool,
        d_model: int = 64,
        layers: int = 2,
        heads: int = 4,
        mlp_ratio: int = 2,
        **kw: Any,
    ) -> None:
        super().__init__(history, dt, use_mu, **kw)
        self.sizes = {"d_model": d_model, "layers": layers, "heads": heads, "mlp_ratio": mlp_ratio}
        in_dim = self.state_dim + self.action_dim + int(use_mu)
        self.net = CausalTransformer(in_dim, d_model, layers, heads, mlp_ratio, history)
        self.head = nn.Linear(d_model, self.state_dim)
        nn.init.zeros_(self.head.weight)  # start as "mean state change"
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_params(cls, params: DistillParams, dt: float, fit: dict[str, float]) -> TransformerModel:
        return cls(params.history, dt, params.use_friction_label, **params.transformer.model_dump(exclude={"members"}))

    def config(self) -> dict[str, Any]:
        return {**super().config(), **self.sizes}

    def forward_step(self, hs: Tensor, ha: Tensor, a: Tensor, mu: Tensor | None) -> Tensor:
        z = self.head(
            self.net(history_tokens(self, hs, ha, a, mu), bf16=self.inference_bf16, compiled=self.inference_compile)
        )  # [N, S] normalised change
        return hs[:, -1] + z * self.norm.delta_std + self.norm.delta_mean
