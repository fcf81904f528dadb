"""The small Mamba-2-style model that examples/serve_mamba.py serves (and
tests/python/seed_engine_loop.py, the seed class's serving loop): random
weights from a seed, in float64 on the CPU, in the recurrent form (one
token per row), with a conv state and an SSM state per layer. Plain
torch: nothing here knows rsp.
SPDX-License-Identifier: Apache-2.0
"""
import torch

VOCAB, D_MODEL, N_LAYERS = 64, 32, 2
D_INNER, HEADS, HEAD_DIM, D_STATE, D_CONV = 64, 4, 16, 8, 4
CONV_CH = D_INNER + 2 * D_STATE  # the conv runs over x, B and C together
# float64: torch's kernels round a row a little differently in batches of
# other shapes (about 1e-14 here), far below any gap that decides a token.
F64 = torch.float64


def rmsnorm(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


class Mamba2:
    """Embedding, N_LAYERS Mamba-2 mixers (in_proj, causal depthwise conv,
    selective SSM with a scalar decay per head, gated norm, out_proj) with
    residuals, then the tied output head. step() is the recurrent form: one
    token per row, so a prefill chunk is a few calls in a row."""

    def __init__(self, seed):
        g = torch.Generator().manual_seed(seed)

        def rnd(*shape, scale=1.0):
            return torch.randn(*shape, generator=g, dtype=F64) * scale

        self.embed = rnd(VOCAB, D_MODEL)
        self.norm_f = 1 + rnd(D_MODEL, scale=0.1)
        self.layers = [dict(
            norm=1 + rnd(D_MODEL, scale=0.1),
            in_proj=rnd(D_MODEL, D_INNER + CONV_CH + HEADS, scale=D_MODEL ** -0.5),
            conv_w=rnd(D_CONV, CONV_CH, scale=0.5), conv_b=rnd(CONV_CH, scale=0.1),
            dt_bias=rnd(HEADS, scale=0.5) - 1.0, a_log=rnd(HEADS, scale=0.5),
            d=rnd(HEADS), gate_norm=1 + rnd(D_INNER, scale=0.1),
            out_proj=rnd(D_INNER, D_MODEL, scale=D_INNER ** -0.5)) for _ in range(N_LAYERS)]

    def step(self, tokens, state):
        """tokens [B]; state: per layer (conv [B, D_CONV, CONV_CH], ssm [B,
        HEADS, HEAD_DIM, D_STATE]). Returns the logits [B, VOCAB] and the
        new state (new tensors: the caller decides where they go)."""
        x = self.embed[tokens]
        out = []
        for p, (conv, ssm) in zip(self.layers, state):
            zxbcdt = rmsnorm(x, p["norm"]) @ p["in_proj"]
            z, xbc, dt = zxbcdt.split([D_INNER, CONV_CH, HEADS], dim=-1)
            conv = torch.cat([conv[:, 1:], xbc[:, None]], dim=1)  # shift the window
            xbc = torch.nn.functional.silu((conv * p["conv_w"]).sum(1) + p["conv_b"])
            xs, b, c = xbc.split([D_INNER, D_STATE, D_STATE], dim=-1)
            dt = torch.nn.functional.softplus(dt + p["dt_bias"])  # [B, HEADS]
            decay = torch.exp(-dt * torch.exp(p["a_log"]))
            xs = xs.view(-1, HEADS, HEAD_DIM)
            ssm = (ssm * decay[:, :, None, None]
                   + (dt[:, :, None] * xs)[..., None] * b[:, None, None, :])
            y = (ssm * c[:, None, None, :]).sum(-1) + p["d"][None, :, None] * xs
            y = rmsnorm(y.reshape(-1, D_INNER) * torch.nn.functional.silu(z), p["gate_norm"])
            x = x + y @ p["out_proj"]
            out.append((conv, ssm))
        return rmsnorm(x, self.norm_f) @ self.embed.T, out


def zero_state(batch):
    return [(torch.zeros(batch, D_CONV, CONV_CH, dtype=F64),
             torch.zeros(batch, HEADS, HEAD_DIM, D_STATE, dtype=F64)) for _ in range(N_LAYERS)]
