"""Real libraries handing work to native thread pools, for measuring
attribution: python3 realpools.py LIBRARY one|two.

Each Python thread calls its library from a function named for it
(LIBRARY_a, LIBRARY_b), so every byte a pool worker allocates has one right
owner: the function whose call handed it the work.
"""
import sys
import threading

lib, mode = sys.argv[1], sys.argv[2]

if lib == "blas":
    import numpy as np

    def run(seed):
        rng = np.random.default_rng(seed)
        a, b = rng.random((1200, 1200)), rng.random((1200, 1200))
        for _ in range(3):
            (a @ b).sum()
            np.linalg.inv(a + 1200 * np.eye(1200)).sum()
elif lib == "sklearn":
    import numpy as np
    from sklearn.cluster import KMeans
    from sklearn.neighbors import NearestNeighbors

    def run(seed):
        rng = np.random.default_rng(seed)
        x = rng.random((4000, 16))
        NearestNeighbors(n_neighbors=5, algorithm="brute").fit(x).kneighbors(x)
        KMeans(n_clusters=8, n_init=2, random_state=seed).fit(x)
elif lib == "numexpr":
    import numexpr as ne
    import numpy as np

    def run(seed):
        rng = np.random.default_rng(seed)
        a, b = rng.random(4_000_000), rng.random(4_000_000)
        for _ in range(5):
            ne.evaluate("sin(a)*2+b**2")
elif lib == "torch":
    import torch

    torch.set_num_threads(4)

    def run(seed):
        torch.manual_seed(seed)
        x = torch.rand(2000, 2000)
        img = torch.rand(8, 3, 128, 128)
        conv = torch.nn.Conv2d(3, 16, 3)
        for _ in range(3):
            (x.sin() * 2).sum()
            x.sort(dim=1)
            x.cumsum(dim=0)
            conv(img).sum()
else:
    sys.exit("unknown library " + lib)


# The owners: a pool worker's bytes belong to whichever of these asked.
def blas_a(): run(1)
def blas_b(): run(2)
def sklearn_a(): run(1)
def sklearn_b(): run(2)
def numexpr_a(): run(1)
def numexpr_b(): run(2)
def torch_a(): run(1)
def torch_b(): run(2)


a, b = globals()[lib + "_a"], globals()[lib + "_b"]
if mode == "one":
    a()
else:
    ts = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
