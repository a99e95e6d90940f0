"""What the comparison scripts share: a distribution-free interval for a median."""
import math


def median_ci(xs, level=0.95):
    """The widest order statistics (x_j, x_{n-1-j}) whose coverage of the median is still at
    least `level` (a sign-test interval), or None with too few values."""
    xs, n, best = sorted(xs), len(xs), None
    for j in range(n // 2):
        if sum(math.comb(n, i) for i in range(j + 1, n - j)) / 2 ** n < level:
            break
        best = (xs[j], xs[n - 1 - j])
    return best


def ci_text(xs, spec=".3f"):
    """The interval as `[lo..hi]`, each bound formatted with `spec`."""
    best = median_ci(xs)
    return f"[{best[0]:{spec}}..{best[1]:{spec}}]" if best else "[too few rounds]"
