"""Branch enumeration: conditionals and trip counts chosen by all-reduce results (the same on
every member of the group) are tried one combination per run of the whole check."""

from __future__ import annotations

__all__ = ["MAX_BRANCH_RUNS", "Choices"]

# Runs of the whole check over combinations of data-chosen (but uniform) branches.
MAX_BRANCH_RUNS = 64


class Choices:
    """The branches conditionals with unknown-but-keyed indices take in one run, enumerated
    depth first over the order the keys were met (a later key may exist only for some
    earlier choices): every device meeting a key takes the same branch."""

    def __init__(self):
        self.fixed: dict = {}
        self.made: dict = {}        # key -> [branch, branches, where, devices]
        self.order: list = []
        self.runs = 0

    def __call__(self, key, n: int, where: str, device: int) -> int:
        if key not in self.made:
            self.made[key] = [self.fixed.get(key, 0), n, where, []]
            self.order.append(key)
        self.made[key][3].append(device)
        return self.made[key][0]

    def describe(self) -> list[str]:
        out = []
        for key in self.order:
            k, n, w, ds = self.made[key]
            on = f"on device{'s' if len(ds) > 1 else ''} {', '.join(map(str, ds))}"
            if key[0] == "trip":  # a loop's uniform trip count (trace.py)
                runs = f"{k} or more" if k == n - 1 else str(k)
                out.append(f"{w} runs {runs} iteration{'' if k == 1 else 's'} {on}")
            else:
                out.append(f"{w} takes branch {k} {on}")
        return out

    def advance(self) -> bool:
        """The next combination, or False when all were run."""
        self.runs += 1
        for i in range(len(self.order) - 1, -1, -1):
            k, n = self.made[self.order[i]][:2]
            if k + 1 < n:
                self.fixed = {key: self.made[key][0] for key in self.order[:i]}
                self.fixed[self.order[i]] = k + 1
                self.made, self.order = {}, []
                return True
        return False
