#!/usr/bin/env python3
"""golden_fixtures.py: writes the tiny model fixtures of tests/data/fixtures whose goldens come from Hugging Face
transformers + PEFT in float64 (the layout ../shared/fixtures/README.md describes), for the families added after
tiny-qwen2 / tiny-llama / tiny-qwen3 (those came from the shared fixtures and are not rewritten here).

For each fixture: a model of a small random config (seeded), its weights rounded to float32 (model.safetensors)
and bf16 (model.bf16.safetensors), a LoRA adapter on every projection (PEFT init_lora_weights=False, then B
scaled by 0.1 so A and B are both non-zero), and from a float64 copy of those float32 values: the logits and loss
without and with the adapter, every LoRA gradient, and three steps of torch AdamW (lr 1e-2, betas 0.9/0.999,
eps 1e-8, weight decay 0.01, clip_grad_norm_ 1.0, the same batch each step).

    /work/venv-hf/bin/python scripts/golden_fixtures.py tests/data/fixtures [tiny-mistral ...]

Each fixture also checks that the feature it exists for matters: tiny-mistral's logits with the sliding window
removed must differ, or the golden would not test the window (tiny-phi3: LongRoPE's long factors, the window,
partial rotary).
"""
import copy
import json
import os
import sys

import torch

BATCH, SEQ = 2, 24

# tiny-mistral: sliding_window 6 < SEQ, so every query past position 5 loses keys to the window.
FIXTURES = {
    "tiny-mistral": {
        "class": "MistralForCausalLM",
        "config": dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                       rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=6, tie_word_embeddings=False,
                       initializer_range=0.08, bos_token_id=1, eos_token_id=2),
        "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        "without": {"sliding_window": None},  # the config change the golden must be sensitive to
        "seed": 25,
    },
    # tiny-qwen2-swa: Qwen2 with use_sliding_window; max_window_layers 1 of 2, so layer 0 attends fully and layer 1
    # slides (config.json saves it as transformers 5's layer_types); q/k/v bias, tied embeddings.
    "tiny-qwen2-swa": {
        "class": "Qwen2ForCausalLM",
        "config": dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6,
                       rope_theta=1000000.0, use_sliding_window=True, sliding_window=5, max_window_layers=1,
                       tie_word_embeddings=True, initializer_range=0.08),
        "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        "without": {"use_sliding_window": False},
        "seed": 26,
    },
    # tiny-gemma2: layer 0 slides (window 6 < SEQ), layer 1 attends fully; soft-caps small enough that the
    # scores and logits reach them; query_pre_attn_scalar 24 != head_dim; random norm weights (transformers
    # starts them at 0, which would hide a (1 + w) or a pre/post mix-up); tied embeddings.
    "tiny-gemma2": {
        "class": "Gemma2ForCausalLM",
        "config": dict(vocab_size=384, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                       rms_norm_eps=1e-6, rope_theta=10000.0, sliding_window=6, query_pre_attn_scalar=24,
                       attn_logit_softcapping=0.5, final_logit_softcapping=1.5, tie_word_embeddings=True,
                       initializer_range=0.08, pad_token_id=0, bos_token_id=2, eos_token_id=1),
        "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        "without": [{"sliding_window": 1000}, {"attn_logit_softcapping": None}, {"final_logit_softcapping": None}],
        "random_norms": True,
        "seed": 27,
    },
    # tiny-gemma3: layers 0-1 slide (window 5) with their own RoPE base (10000, default), layer 2 attends fully
    # with base 1e6 and linear scaling x2 (transformers 5's rope_parameters per layer type); q/k norms.
    "tiny-gemma3": {
        "class": "Gemma3ForCausalLM",
        "config": dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=1, head_dim=16, max_position_embeddings=256,
                       rms_norm_eps=1e-6, sliding_window=5, sliding_window_pattern=3, query_pre_attn_scalar=16,
                       rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
                                        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
                       tie_word_embeddings=True, initializer_range=0.08, pad_token_id=0, bos_token_id=2,
                       eos_token_id=1),
        "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        "without": [{"sliding_window": 1000},
                    {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}],
        "random_norms": True,
        "seed": 28,
    },
    # tiny-phi3: Phi3ForCausalLM (fused qkv_proj / gate_up_proj, one LoRA each), LongRoPE with
    # original_max_position_embeddings 16 < SEQ, so the long factors apply (seq_len = max position + 1 = 24), the
    # attention factor sqrt(1 + ln(64/16) / ln 16) scales cos / sin, partial rotary 0.75 (12 of 16 dims rotate, as
    # Phi-4-mini), sliding_window 10 on every layer.
    "tiny-phi3": {
        "class": "Phi3ForCausalLM",
        "config": dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                       original_max_position_embeddings=16, rms_norm_eps=1e-5, sliding_window=10,
                       rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.75,
                                            short_factor=[1.0, 1.05, 1.2, 1.5, 2.5, 4.0],
                                            long_factor=[1.0, 1.3, 2.0, 3.5, 7.0, 15.0]),
                       tie_word_embeddings=False, initializer_range=0.08, bos_token_id=1, eos_token_id=2,
                       pad_token_id=2),
        "targets": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
        "without": [{"original_max_position_embeddings": 32}, {"sliding_window": None},
                    {"rope_parameters": dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=1.0)}],
        "seed": 31,
    },
    # tiny-phi3-short: the same family with original_max_position_embeddings 32 > SEQ, so the short factors apply
    # (the attention factor from max_position_embeddings / original still scales cos / sin), full rotary, tied
    # embeddings; config.json rewritten as the hub's checkpoints spell it (transformers 4: rope_scaling with
    # "type", rope_theta at the top level).
    "tiny-phi3-short": {
        "class": "Phi3ForCausalLM",
        "config": dict(vocab_size=384, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                       original_max_position_embeddings=32, rms_norm_eps=1e-5,
                       rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                            short_factor=[1.0, 1.1, 1.3, 1.7, 2.4, 3.3, 4.6, 6.0],
                                            long_factor=[1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0]),
                       tie_word_embeddings=True, initializer_range=0.08, bos_token_id=1, eos_token_id=2,
                       pad_token_id=2),
        "targets": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
        "without": [{"original_max_position_embeddings": 16}],
        "hub_spelling": True,
        "seed": 28,
    },
}


def hub_spelling(path):
    """Rewrites a Phi-3 config.json as transformers 4 wrote it (as the hub's checkpoints have it): rope_scaling
    {"type": "longrope", short_factor, long_factor}, rope_theta and partial_rotary_factor at the top level."""
    with open(path) as f:
        c = json.load(f)
    rp = c.pop("rope_parameters")
    c["rope_theta"] = rp.pop("rope_theta")
    if rp.get("partial_rotary_factor", 1.0) != 1.0:
        c["partial_rotary_factor"] = rp["partial_rotary_factor"]
    c["rope_scaling"] = {"type": rp["rope_type"], "short_factor": rp["short_factor"], "long_factor": rp["long_factor"]}
    with open(path, "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")


def make_config(spec):
    import transformers

    cls = getattr(transformers, spec["class"])
    cfg = cls.config_class(**copy.deepcopy(spec["config"]))
    cfg._attn_implementation = "eager"
    return cls, cfg


def peft_name(name):
    """PEFT's parameter name as save_pretrained writes it: the adapter name dropped."""
    return name.replace(".default", "")


def batch(vocab, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (BATCH, SEQ), generator=g)  # [B, S] I64
    labels = ids.clone()  # [B, S]; -100: not counted
    labels[0, :5] = -100
    labels[1, SEQ - 3:] = -100
    return ids, labels


def causal_loss(logits, labels):
    """HF's causal-LM loss: logits [B, S, V] at t predict labels [B, S] at t+1; mean over counted tokens."""
    lg = logits[:, :-1].reshape(-1, logits.shape[-1])
    lb = labels[:, 1:].reshape(-1)
    return torch.nn.functional.cross_entropy(lg, lb, ignore_index=-100, reduction="mean")


def write_fixture(out_root, name, spec):
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import save_file

    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(spec["seed"])
    cls, cfg = make_config(spec)
    torch.set_default_dtype(torch.float32)
    model32 = cls(cfg).eval()  # float32 weights: what model.safetensors stores
    if spec.get("random_norms"):
        with torch.no_grad():
            for pname, p in model32.named_parameters():
                if pname.endswith("norm.weight"):
                    p.normal_(0.0, 0.3)
    model32.save_pretrained(out, safe_serialization=True)
    if spec.get("hub_spelling"):
        hub_spelling(os.path.join(out, "config.json"))
    sd = {k: v.detach().clone().contiguous() for k, v in model32.state_dict().items()}
    if cfg.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    save_file({k: v.to(torch.bfloat16) for k, v in sd.items()}, os.path.join(out, "model.bf16.safetensors"),
              metadata={"format": "pt"})
    lcfg = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=spec["targets"], init_lora_weights=False)
    peft32 = get_peft_model(model32, lcfg)
    with torch.no_grad():
        for pname, p in peft32.named_parameters():
            if "lora_B" in pname:
                p.mul_(0.1)
    peft32.save_pretrained(os.path.join(out, "adapter-init"))
    os.remove(os.path.join(out, "adapter-init", "README.md"))  # PEFT's model card: not part of the fixture
    lora_init = {peft_name(n): p.detach().clone() for n, p in peft32.named_parameters() if "lora_" in n}

    # float64 from here on, from the float32 values just saved
    torch.set_default_dtype(torch.float64)
    ids, labels = batch(cfg.vocab_size, spec["seed"] + 1)
    res = {"input_ids": ids, "labels": labels}

    def fresh_base(overrides=None):
        # a fresh copy: transformers writes into the rope_parameters dict it is given (original_max_position_embeddings),
        # and a model reads it again at every forward (LongRoPE's short / long choice)
        c = cls.config_class(**copy.deepcopy({**spec["config"], **(overrides or {})}))
        c._attn_implementation = "eager"
        m = cls(c).to(torch.float64).eval()
        m.load_state_dict({k: v.to(torch.float64) for k, v in sd.items()}, strict=not cfg.tie_word_embeddings)
        if cfg.tie_word_embeddings:
            m.tie_weights()
        return m

    base = fresh_base()
    with torch.no_grad():
        logits = base(input_ids=ids).logits  # [B, S, V]
    res["base_logits"] = logits.reshape(BATCH * SEQ, -1)
    res["base_loss"] = causal_loss(logits, labels).reshape(1)
    withouts = spec["without"] if isinstance(spec["without"], list) else [spec["without"]]
    for without in withouts:
        with torch.no_grad():
            other = fresh_base(without)(input_ids=ids).logits
        diff = (other - logits).abs().max().item() / logits.abs().max().item()
        print(f"{name}: logits move by {diff:.3g} of their max with {without}")
        if diff < 1e-2:
            raise SystemExit(f"{name}: the golden does not depend on {without}; change the fixture")

    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=spec["targets"],
                                            init_lora_weights=False))
    named = {peft_name(n): p for n, p in model.named_parameters() if "lora_" in n}
    if set(named) != set(lora_init):
        raise SystemExit(f"{name}: adapter names differ between the float32 and float64 models")
    with torch.no_grad():
        for n, p in named.items():
            p.copy_(lora_init[n].to(torch.float64))
    params = [named[n] for n in sorted(named)]
    out0 = model(input_ids=ids)
    res["lora_logits"] = out0.logits.detach().reshape(BATCH * SEQ, -1)
    opt = torch.optim.AdamW(params, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    losses, norms = [], []
    model.train()
    for step in range(3):
        opt.zero_grad(set_to_none=True)
        loss = causal_loss(model(input_ids=ids).logits, labels)
        loss.backward()
        if step == 0:
            for n in sorted(named):
                res["grad." + n] = named[n].grad.detach().clone()
                # Adam's first step is about lr * sign(g): an element this close to zero would make the three-step
                # golden test a measure of rounding in its gradient rather than of the implementation
                g = res["grad." + n].abs()
                if g.min().item() < 5e-6 * g.max().item():
                    raise SystemExit(f"{name}: grad.{n} has an element {g.min().item() / g.max().item():.2g} of its "
                                     "max; pick another seed")
        losses.append(loss.item())
        norms.append(torch.nn.utils.clip_grad_norm_(params, 1.0).item())
        opt.step()
    with torch.no_grad():
        losses.append(causal_loss(model(input_ids=ids).logits, labels).item())
    for n in sorted(named):
        res["step3." + n] = named[n].detach().clone()
    res["losses"] = torch.tensor(losses)
    res["grad_norms_preclip"] = torch.tensor(norms)
    save_file({k: (v if v.dtype == torch.int64 else v.to(torch.float32)).contiguous() for k, v in res.items()},
              os.path.join(out, "golden.safetensors"))
    import peft
    import transformers

    golden = {
        "model": name, "batch": BATCH, "seq": SEQ,
        "lora": {"r": 8, "alpha": 16, "targets": spec["targets"], "dropout": 0.0},
        "labels_note": "HF causal-LM loss: logits[:, :-1] predict labels[:, 1:], -100 ignored, mean over counted tokens",
        "optimizer": {"name": "adamw", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-08, "weight_decay": 0.01,
                      "max_grad_norm": 1.0, "schedule": "constant", "steps": 3},
        "lora_init": "adapter-init/ (PEFT format); B scaled by 0.1 after init_lora_weights=False",
        "losses": losses, "grad_norms_preclip": norms,
        "computed_in": "float64, stored float32",
        "reference": f"transformers {transformers.__version__} + peft {peft.__version__} + torch {torch.__version__}, "
                     "eager attention (scripts/golden_fixtures.py)",
    }
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=2)
        f.write("\n")
    print(f"{name}: losses {losses}")


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    names = sys.argv[2:] or list(FIXTURES)
    for n in names:
        if n not in FIXTURES:
            raise SystemExit(f"unknown fixture {n} (known: {', '.join(FIXTURES)})")
        write_fixture(sys.argv[1], n, FIXTURES[n])


if __name__ == "__main__":
    main()
