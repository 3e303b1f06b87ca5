"""SpGEMM rows of 9 to 128 multiply-adds whose columns spread too wide for the dense
fill (a graph's rows) are appended to the row's slot and sorted, like the rows of at
most 8, where the output has int32 coordinates and 32-bit values and the target
AVX-512: the sort runs in vector registers (sc_k_sortsumv_32_*, up to 16 vectors of 8
keys, each key the coordinate and the entry's place), and equal coordinates are summed
within and across the vectors.  The vectors are 32 bytes: the kernel's machine code has
no 512-bit instruction (one lowers the core's clock for the whole call).  A row with a coordinate of 2^25 - 1 or more (which the
32-bit key cannot hold) is sorted by insertion instead.  Elsewhere such rows keep the
bitmap.

Checked against a reference accumulated entry by entry: rows of 0-136 products (both
sides of 8, 16, 32, 64 and 128, where the network's size changes, and past the
threshold), their columns distinct and spread, in two long runs (crossing vectors) with
one far column, in runs of three, and random with repeats; f32 and int32 values with
int32 indices (the sorted path), f32 with int64 and f64 with int32 (the bitmap), one and
two threads, and under AddressSanitizer + UBSan; and rows reaching columns on both sides
of 2^25 - 1."""
import os
import shutil
import subprocess

import torch

from conftest import CHECK_CSR, run_code, sanitized_env, with_threads

import pytest

CODE = r'''
import torch, scorch
''' + CHECK_CSR + r'''

N = 4001          # the output's columns: a prime, so t * 397 % N is distinct for t < N


def column(r, t, p, g):
    kind = r % 4
    if kind == 0:                          # distinct, spread over the row
        return (r * 131 + t * 397) % N
    if kind == 1:                          # two long runs, then one far column
        return N - 1 if t == p - 1 else 7 if t < p // 2 else 8
    if kind == 2:                          # runs of three, the last far out
        return N - 1 - r % 3 if t == p - 1 else 50 * (t // 3) + r % 5
    return int(torch.randint(0, 40, (1,), generator=g)) * 100   # random, repeats


def rows_of_products(dt, it, g):
    """A (n x m) and B (m x N): row r of A·B has r % 137 products; B's rows have one
    entry each.  The reference adds every product into a dense row."""
    n = 4 * 137
    ai, aj, av, bi, bj, bv = [], [], [], [], [], []
    ref = torch.zeros(n, N, dtype=torch.float64)
    j = 0
    for r in range(n):
        p = r % 137
        for t in range(p):
            x = float(torch.randint(1, 5, (1,), generator=g))
            y = float(torch.randint(1, 5, (1,), generator=g)) * (-1) ** (t % 3 == 1)
            c = column(r, t, p, g)
            ai.append(r); aj.append(j); av.append(x)
            bi.append(j); bj.append(c); bv.append(y)
            ref[r, c] += x * y
            j += 1
    a = torch.sparse_coo_tensor(torch.tensor([ai, aj]), torch.tensor(av, dtype=dt), (n, j))
    b = torch.sparse_coo_tensor(torch.tensor([bi, bj]), torch.tensor(bv, dtype=dt), (j, N))
    return (scorch.to_sparse(a, "csr", index_dtype=it), scorch.to_sparse(b, "csr", index_dtype=it),
            ref.to(dt))

g = torch.Generator().manual_seed(11)
for dt, it in COMBOS:
    for threads in (1, 2):
        torch.set_num_threads(threads)
        A, B, ref = rows_of_products(dt, it, g)
        check(scorch.einsum("ij,jk->ik", A, B), ref, dict(rtol=0, atol=0))
        check(A @ B, ref, dict(rtol=0, atol=0))
print("ok")
'''

COMBOS_ALL = ("import torch\nCOMBOS = [(torch.float32, torch.int32), (torch.int32, torch.int32), "
              "(torch.float32, torch.int64), (torch.float64, torch.int32)]\n")
COMBOS_SAN = "import torch\nCOMBOS = [(torch.float32, torch.int32), (torch.int32, torch.int32)]\n"


def test_sorted_rows_against_reference(tmp_path):
    run_code(COMBOS_ALL + CODE, tmp_path)


def test_sorted_rows_sanitized(tmp_path):
    san = sanitized_env()
    if san is None:
        pytest.skip("gcc's ASan/UBSan runtimes are not installed")
    run_code(COMBOS_SAN + CODE, tmp_path, **san)


def test_kernel_sorts_rows_up_to_128_products():
    """With int32 coordinates, 32-bit values and 64-byte vectors, a row of 9 to 128
    products that is not dense takes sc_k_sortsumv_32_* before the bitmap; f64 values
    and int64 coordinates keep the bitmap for those rows (no such sort for them)."""
    import scorch
    A = scorch.to_sparse(torch.eye(20), "csr")
    src = scorch.explain("ij,jk->ik", A, A)
    if "vectors: 64 bytes" not in src:
        pytest.skip("scorch writes narrower vectors on this machine")
    assert "<= 128) && (bnd_" in src and "= sc_k_sortsumv_32_f32(out_crd_" in src
    for dt, it in ((torch.float64, torch.int32), (torch.float32, torch.int64)):
        src = scorch.explain("ij,jk->ik", *[scorch.to_sparse(torch.eye(20, dtype=dt), "csr",
                                                             index_dtype=it)] * 2)
        assert "<= 128) && (bnd_" not in src and "= sc_k_sortsumv" not in src, (dt, it)


def test_coordinates_past_the_key_width_sort_by_insertion():
    """The vector sort packs coordinate << 7 | place into 32 bits, so a row reaching
    column 2^25 - 1 or beyond is sorted by insertion: rows of 2-128 products over 2^25 + 2
    columns, some reaching only 2^25 - 2 (the greatest the keys hold), others 2^25 - 1,
    2^25 and the last column, with repeats, against a reference summed entry by entry,
    f32 and int32 values (one thread: the workspace is 2^25 columns)."""
    import scorch
    N, edge = 2 ** 25 + 2, 2 ** 25 - 1
    far = {0: [edge - 1], 1: [edge], 2: [edge, edge - 1, N - 1], 3: [N - 2, edge + 1]}
    ai, av, bj, bv, ref = [], [], [], [], {}
    for r, p in enumerate((2, 9, 16, 17, 33, 64, 65, 100, 128, 128, 40, 90)):
        cols = [(t * 7919 + r) % 5000 * 97 for t in range(p)]
        cols[-1] = cols[0]                                 # a repeat
        big = far[r % 4]
        cols[1:1 + len(big)] = big[:p - 1]
        cols[p // 2] = big[0]                              # a far column twice
        for t, c in enumerate(cols):            # each A entry meets a B row of one entry
            x, y = 1 + r % 3, t % 5 + 1
            ai.append(r)
            av.append(x)
            bj.append(c)
            bv.append(y)
            ref[(r, c)] = ref.get((r, c), 0) + x * y
    n, m = ai[-1] + 1, len(ai)
    for dt in (torch.float32, torch.int32):
        a = torch.sparse_coo_tensor(torch.tensor([ai, range(m)]), torch.tensor(av, dtype=dt),
                                    (n, m))
        b = torch.sparse_coo_tensor(torch.tensor([range(m), bj]), torch.tensor(bv, dtype=dt),
                                    (m, N))
        A, B = (scorch.to_sparse(x, "csr", index_dtype=torch.int32) for x in (a, b))
        C = with_threads(1, lambda: A @ B)
        pos, crd, val = C._pos[1].long(), C._crd[1].long(), C._vals
        got = {}
        for r in range(len(pos) - 1):
            seg = crd[pos[r]:pos[r + 1]].tolist()
            assert seg == sorted(set(seg)), (dt, r, seg)
            got.update(((r, c), v) for c, v in zip(seg, val[pos[r]:pos[r + 1]].tolist()))
        assert got == ref, dt


def test_spgemm_kernels_have_no_512_bit_instructions(tmp_path):
    """The SpGEMM kernels (f32 and int32 values, whose rows sort in vector registers, and
    f64), compiled as the JIT compiles them, use no zmm register: a 512-bit instruction
    anywhere in the call lowers the core's clock for all of it."""
    import scorch
    from scorch import _compiler
    if shutil.which("objdump") is None:
        pytest.skip("objdump is not installed")
    for dt in (torch.float32, torch.int32, torch.float64):
        A = scorch.to_sparse(torch.eye(20, dtype=dt), "csr", index_dtype=torch.int32)
        src = scorch.explain("ij,jk->ik", A, A)
        if "vectors: 64 bytes" not in src:
            pytest.skip("scorch writes narrower vectors on this machine")
        c = tmp_path / "k.c"
        c.write_text(src.split("generated C (", 1)[1].split("):\n", 1)[1])
        obj = tmp_path / "k.o"
        subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", "-w", "-I",
                        _compiler._include_dir(), "-c", str(c), "-o", str(obj)], check=True)
        text = subprocess.run(["objdump", "-d", str(obj)], capture_output=True, text=True,
                              check=True).stdout
        assert "sortsum" in text or dt == torch.float64, dt
        assert "%zmm" not in text, dt
