"""SparseTensors used from several threads: kernels run with the GIL released, so another
thread may replace a tensor's arrays (copy_ of another pattern, as load_state_dict does;
.data =, as Module.to does) while a call reads them.  The racing call computes with the
old or the new arrays, or raises naming the race; no call crashes, and once the writer is
done every call computes with the new arrays (nothing scorch kept of the old ones, a
prepared description or a transposed copy, survives the write)."""
import threading

import pytest
import torch

import scorch
from conftest import make_dense, seed_of


@pytest.mark.parametrize("write", ["copy_", "data"])
@pytest.mark.parametrize("product", ["A @ X", "A.t() @ G"])
def test_arrays_replaced_while_another_thread_computes(write, product):
    n = 300
    xs = [make_dense((n, n), torch.float32, seed_of("race", write, k), density=0.05)
          for k in range(4)]
    X, G = torch.randn(n, 8), torch.randn(n, 4)
    for trial in range(40):
        A = scorch.to_sparse(xs[0], "csr")
        run = (lambda: A @ X) if product == "A @ X" else (lambda: A.t() @ G)
        stop, errors = False, []

        def reader():
            while not stop:
                try:
                    run()
                except ValueError as e:          # a race seen: said so, never a crash
                    errors.append(str(e))

        th = threading.Thread(target=reader)
        th.start()
        try:
            for k in (1, 2, 3):
                with torch.no_grad():
                    if write == "copy_":
                        A.copy_(scorch.to_sparse(xs[k], "csr"))
                    else:
                        A.data = scorch.to_sparse(xs[k], "csr")
        finally:
            stop = True
            th.join()
        assert all("replaced by another thread" in e for e in errors), errors
        torch.testing.assert_close(run(), xs[3] @ X if product == "A @ X" else xs[3].t() @ G)


def test_one_tensor_many_threads():
    x = make_dense((200, 150), torch.float64, seed_of("threads-shared"), density=0.05)
    A = scorch.to_sparse(x, "csr")
    X, G = torch.randn(150, 8, dtype=torch.float64), torch.randn(200, 3, dtype=torch.float64)
    bad = []

    def work(i):
        for _ in range(30):
            if not torch.allclose(A @ X, x @ X) or not torch.allclose(A.t() @ G, x.t() @ G):
                bad.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
