"""Random einsum equations in the forms torch.einsum reads and a kernel cannot (an
ellipsis over batch dimensions, size-1 dimensions broadcast, a repeated index, 0-D
operands) over a sparse first operand in a random format and others dense or, now and
then, sparse too, against torch.einsum on the float64 references."""
import random

import pytest
import torch

import scorch
from test_random_differential import (call_or_refusal, compare, random_dense_operand,
                                      random_format, random_sparse)

SEEDS = range(160)


def random_case(seed):
    """(equation, [(shape, sparse?)]): a batch of 0-2 dimensions under '...' in some
    terms (an operand's width right-aligned, a dimension 1 now and then: broadcast),
    1-3 core letters a term, a repeated one now and then, a 0-D operand now and then;
    the output implicit or explicit (with or without the ellipsis)."""
    rng = random.Random(seed)
    batch = [rng.choice([2, 3]) for _ in range(rng.randint(0, 2))]
    size = {c: rng.choice([1, 2, 3, 4]) for c in "ijk"}
    terms, shapes = [], []
    for t in range(rng.randint(1, 3)):
        if t > 0 and rng.random() < 0.15:
            terms.append("")
            shapes.append(())
            continue
        core = rng.sample("ijk", rng.randint(1, 3))
        if rng.random() < 0.15:
            core.insert(rng.randint(0, len(core)), rng.choice(core))
        w = rng.randint(0, len(batch)) if batch else 0
        ell = w > 0 or (batch and rng.random() < 0.5)
        bshape = [1 if rng.random() < 0.3 else n for n in batch[len(batch) - w:]]
        at = rng.randint(0, len(core)) if ell else 0
        term = "".join(core[:at]) + ("..." if ell else "") + "".join(core[at:])
        terms.append(term)
        shapes.append([size[c] for c in core[:at]] + bshape + [size[c] for c in core[at:]])
    used = sorted(set("".join(terms).replace(".", "")))
    r = rng.random()
    if r < 0.3:
        expr = ",".join(terms)
    else:
        out = rng.sample(used, rng.randint(0, len(used)))
        if any("..." in t for t in terms) and rng.random() < 0.8:
            out.insert(rng.randint(0, len(out)), "...")
        expr = ",".join(terms) + "->" + "".join(out)
    return expr, shapes


def run_case(seed):
    expr, shapes = random_case(seed)
    rng = random.Random(seed * 3 + 1)
    g = torch.Generator().manual_seed(seed)
    dtype = rng.choice([torch.float32, torch.float64])
    ops, refs = [], []
    for k, shape in enumerate(shapes):
        if len(shape) >= 1 and (k == 0 or rng.random() < 0.25):   # (sparse × sparse too)
            x, ref, _ = random_sparse(g, rng, list(shape), random_format(rng, len(shape)),
                                      dtype, rng.choice([torch.int32, torch.int64]),
                                      rng.choice([0.0, 0.3, 0.7, 1.0]))
        elif not shape:
            ref = torch.randn((), generator=g, dtype=torch.float64)
            x = ref.to(dtype)
        else:
            x, ref, _ = random_dense_operand(g, rng, list(shape), dtype, 1.0)
        ops.append(x)
        refs.append(ref)
    what = f"seed {seed}: {expr!r} {dtype} shapes {shapes} first {ops[0]!r:.80}"
    try:
        want = torch.einsum(expr, *refs)
    except RuntimeError:
        return "torch refuses"
    got, refusal = call_or_refusal(lambda: torch.einsum(expr, *ops), ops, what)
    if refusal:
        return refusal
    compare(got, want, dtype, what)
    return "ok"


@pytest.mark.parametrize("batch", range(4))
def test_random_forms(batch):
    outcomes = [run_case(s) for s in SEEDS[batch::4]]
    ok = outcomes.count("ok")
    refused = [o for o in outcomes if o not in ("ok", "torch refuses")]
    assert not refused, refused   # (a stretched 1-D sparse operand of size 1 had been)
    assert ok >= len(outcomes) // 2, outcomes
