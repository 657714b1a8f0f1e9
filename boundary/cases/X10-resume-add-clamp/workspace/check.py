import sys
sys.path.insert(0, ".")
from calc.ops import add, clamp
sys.exit(0 if add(2, 3) == 5 and clamp(12, 0, 10) == 10 and clamp(-1, 0, 10) == 0 else 1)
