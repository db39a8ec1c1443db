"""PyTorch on the CPU: a small multilayer perceptron trained with SGD on
generated data, one thread. A real library's allocation pattern: tensors
from its own CPU allocator (malloc underneath), autograd graphs of Python
and C++ objects each step. Usage: py_torch.py STEPS. The last line is
"checksum=... loop_s=... maxrss_kb=... cpu_s=...": the checksum (the last
loss, in parts per million) depends only on STEPS."""
import sys
import time

from peak_rss import peak_rss_kb  # beside this script


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(256, 64)
    y = (x[:, :8].sum(dim=1) > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    loop = time.perf_counter() - t0
    print("checksum=%d loop_s=%.4f maxrss_kb=%d cpu_s=%.4f"
          % (round(loss.item() * 1e6), loop, peak_rss_kb(), time.process_time()))


if __name__ == "__main__":
    main()
