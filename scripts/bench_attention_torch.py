#!/usr/bin/env python3
"""bench_attention_torch.py: times PyTorch's fused attention (SDPA, flash and cuDNN backends) forward and backward
on the shapes of the qlt_gpu_check perf rows, so the ratio to qlora-train's kernel can be recorded.

Shape: batch 4, seq 2048, heads 28 (query) / 4 (kv), head_dim 128, causal, bf16. GQA is handled by
expanding k/v to 28 heads before SDPA (what transformers does with repeat_kv); the expand+copy is timed
separately and excluded from the attention numbers. FLOPs use the flash-attention convention:
fwd = 4 * B * H * S^2 / 2 * hd (causal), bwd = 2.5 * fwd.

Usage: python3 scripts/bench_attention_torch.py [--batch 4 --seq 2048 --heads 28 --kv-heads 4 --head-dim 128]
"""
import argparse

import torch
import torch.nn.functional as F


def timed(fn, iters):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters  # ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=28)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    B, S, H, KV, D = a.batch, a.seq, a.heads, a.kv_heads, a.head_dim
    dev, dt = "cuda", torch.bfloat16
    torch.manual_seed(0)
    q = torch.randn(B, H, S, D, device=dev, dtype=dt, requires_grad=True)
    k = torch.randn(B, KV, S, D, device=dev, dtype=dt)
    v = torch.randn(B, KV, S, D, device=dev, dtype=dt)
    ke = k.repeat_interleave(H // KV, dim=1).detach().requires_grad_(True)
    ve = v.repeat_interleave(H // KV, dim=1).detach().requires_grad_(True)
    dout = torch.randn(B, H, S, D, device=dev, dtype=dt)
    flops_fwd = 4.0 * B * H * S * S / 2 * D
    flops_bwd = 2.5 * flops_fwd

    from torch.nn.attention import SDPBackend, sdpa_kernel
    t_rep = timed(lambda: k.repeat_interleave(H // KV, dim=1), a.iters)
    shape = f"B{B} S{S} H{H}/{KV} hd{D} causal"
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, cuDNN {torch.backends.cudnn.version()}")
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel([backend]):
                def fwd():
                    return F.scaled_dot_product_attention(q, ke, ve, is_causal=True)

                out = fwd()

                def bwd():
                    q.grad = ke.grad = ve.grad = None
                    out.backward(dout, retain_graph=True)

                t_fwd = timed(fwd, a.iters)
                t_bwd = timed(bwd, a.iters)
        except RuntimeError as e:  # backend not available for this shape / build
            print(f"| torch SDPA {name} | {shape} | not available: {str(e).splitlines()[0][:120]} |")
            continue
        print(f"| torch SDPA {name} | {shape} | fwd {t_fwd:.3f} ms ({flops_fwd / t_fwd / 1e9:.1f} TFLOP/s) | "
              f"bwd {t_bwd:.3f} ms ({flops_bwd / t_bwd / 1e9:.1f} TFLOP/s) | fwd+bwd "
              f"{(flops_fwd + flops_bwd) / (t_fwd + t_bwd) / 1e9:.1f} TFLOP/s | repeat_kv {t_rep:.3f} ms (excluded) |")

if __name__ == "__main__":
    main()
