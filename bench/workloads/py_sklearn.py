"""scikit-learn: a RandomForestClassifier fitted with n_jobs=2 (two worker
threads) on a generated data set, then scored. A real library's allocation
pattern: numpy arrays, Cython tree builders, joblib's thread pool. Usage:
py_sklearn.py TREES [SAMPLES]. The last line is
"checksum=... loop_s=... maxrss_kb=... cpu_s=...": the checksum (the
training accuracy, in parts per million) depends only on the arguments."""
import sys
import time

from peak_rss import peak_rss_kb  # beside this script


def main():
    trees = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    samples = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier

    t0 = time.perf_counter()
    x, y = make_classification(n_samples=samples, n_features=20, n_informative=8, random_state=0)
    forest = RandomForestClassifier(n_estimators=trees, n_jobs=2, random_state=0).fit(x, y)
    score = forest.score(x, y)
    loop = time.perf_counter() - t0
    print("checksum=%d loop_s=%.4f maxrss_kb=%d cpu_s=%.4f"
          % (round(score * 1e6), loop, peak_rss_kb(), time.process_time()))


if __name__ == "__main__":
    main()
