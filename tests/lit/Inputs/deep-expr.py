# Writes a model whose output is x + x + ... (N terms) on one line.
import sys
path, n = sys.argv[1], int(sys.argv[2])
open(path, "w").write("model m { input x: f32[batch,4] output y = x" + " + x" * n + " }\n")
