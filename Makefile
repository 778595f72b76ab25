# modelc — build, demo, test, bench.
#   make demo        set up, build, and run the digits example
#   make test        set up, build, and run every test suite, each in its quick form (about 15
#                    minutes on 2 cores); ends with "N passed, N failed"
#   make test-full   the same with what make test leaves out to stay quick (tests/README.md): on
#                    the simulated GPU every numeric case, every gradient check family, GPT-2's
#                    training and GPU data-parallel training at batch 8, the kernels under three
#                    thread schedules (make cudasim-full: that suite alone); nvcc on every numeric
#                    case and gradient check
#   make SANITIZE=1 test   the same under AddressSanitizer + UBSan
#   make NVCC= ...   force a CPU-only build (CUDA is not required for anything CPU)
#   make fuzz        libFuzzer harnesses (clang) for the front end, safetensors and npy,
#                    FUZZ_SECONDS each (default 60); make fuzz-graphs: FUZZ_GRAPHS random graphs
#   make install PREFIX=/usr/local
CC       ?= cc
PYTHON   ?= python3
PREFIX   ?= /usr/local
B        := build
NVCC     ?= $(shell command -v nvcc 2>/dev/null)

# The first rule: a bare `make` builds the compiler and the runtime.
.DEFAULT_GOAL := all

# FP_FLAGS: no contraction of a*b + c into a fused multiply-add (gcc does it where the target has
# FMA, e.g. under -march=native), nor with nvcc (-fmad=false, NVCC_FLAGS and modelc's nvcc line):
# the CPU and CUDA kernels share their expression code and must round alike.
FP_FLAGS    := -ffp-contract=off
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare $(FP_FLAGS)
ifeq ($(SANITIZE),1)
  SAN      := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  B        := build-san
  export MODELC_CFLAGS := $(SAN)
  export ASAN_OPTIONS := detect_leaks=1
  export UBSAN_OPTIONS := print_stacktrace=1:halt_on_error=1
endif
CFLAGS_ALL := $(CFLAGS_BASE) $(SAN) $(CFLAGS)
# The CPU GEMM: oneDNN's dnnl_sgemm (Debian libdnnl-dev), chosen by measurement over OpenBLAS
# 0.3.21 (bench/gemm/RESULTS.md: about 2x on every shape here); `make DNNL=0` builds on OpenBLAS's
# cblas_sgemm instead. Either way every loop and every GEMM runs on one OpenMP pool (libgomp's,
# the one Debian's oneDNN uses): OMP_FLAGS compiles the runtime and the generated code with it.
DNNL        ?= 1
OMP_FLAGS   := -fopenmp
ifeq ($(DNNL),1)
  BLAS_CFLAGS := -DMRT_WITH_DNNL
  BLAS_LIBS   := -ldnnl
else
  BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
  BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
endif
CJSON_CFLAGS := $(shell pkg-config --cflags libcjson 2>/dev/null || echo -I/usr/include/cjson)
CJSON_LIBS   := $(shell pkg-config --libs libcjson 2>/dev/null || echo -lcjson)
RT_LIBS     := $(CJSON_LIBS) $(BLAS_LIBS) $(OMP_FLAGS) -lm -lpthread

# ---------------------------------------------------------------- runtime
# With nvcc: runtime/*.cu are built for sm_80 and sm_90 (plus compute_90 PTX for newer chips; or
# for NVCC_GENCODE's targets), the C files get -DMRT_WITH_CUDA, and programs link cudart
# statically so that they start on a machine without a driver (cuBLAS is dlopen'ed on first use).
# Without nvcc: rt_nocuda.c answers every CUDA call with "no CUDA support". runtime.cfg records
# which (and the targets), so switching between `make` and `make NVCC=` rebuilds what depends on it.
RT_SRC  := $(wildcard runtime/*.c)
RT_HDR  := $(wildcard runtime/*.h)
RT_PUB  := runtime/modelrt.h runtime/mrt_kernels.h runtime/mrt_launch.h   # installed; rt_*.h are internal
ifneq ($(strip $(NVCC)),)
  CUDA_HOME   ?= $(patsubst %/bin/nvcc,%,$(or $(realpath $(NVCC)),$(NVCC)))
  # NVCC_GENCODE: the targets of the runtime's kernels (make gpu-check builds for its GPU alone)
  NVCC_GENCODE ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                  -gencode arch=compute_90,code=compute_90
  NVCC_FLAGS  := -O3 -fmad=false -std=c++17 $(NVCC_GENCODE) -Xcompiler -fPIC
  RT_CUDA_CFLAGS := -DMRT_WITH_CUDA -I$(CUDA_HOME)/include
  RT_SRC      := $(filter-out runtime/rt_nocuda.c,$(RT_SRC))
  RT_CU_SRC   := $(wildcard runtime/*.cu)
  RT_LIBS     += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lpthread -lstdc++
  MODELC_CUDA_DEFS := -DMODELC_NVCC='"$(NVCC)"' -DMODELC_CUDA_CFLAGS='"$(RT_CUDA_CFLAGS)"'
else
  RT_CUDA_CFLAGS :=
  RT_SRC      := $(filter-out runtime/rt_cuda.c,$(RT_SRC))
  RT_CU_SRC   :=
  MODELC_CUDA_DEFS := -DMODELC_NVCC='""' -DMODELC_CUDA_CFLAGS='""'
endif
RT_OBJ  := $(RT_SRC:runtime/%.c=$(B)/obj/runtime/%.o) $(RT_CU_SRC:runtime/%.cu=$(B)/obj/runtime/%.cu.o)
RT_LIB  := $(B)/lib/libmodelrt.a
RT_INC  := $(RT_PUB:runtime/%=$(B)/include/modelc/%)
RT_CFG  := $(B)/obj/runtime.cfg

# Rewritten only when the CUDA configuration changes (its mtime then triggers rebuilds).
FORCE:
$(RT_CFG): FORCE | $(B)/setup.stamp
	@mkdir -p $(dir $@)
	@echo 'nvcc=$(NVCC) libs=$(RT_LIBS) blas=$(BLAS_CFLAGS) gencode=$(NVCC_GENCODE) fp=$(FP_FLAGS)' | cmp -s - $@ || \
	  echo 'nvcc=$(NVCC) libs=$(RT_LIBS) blas=$(BLAS_CFLAGS) gencode=$(NVCC_GENCODE) fp=$(FP_FLAGS)' > $@
$(B)/obj/runtime/%.o: runtime/%.c $(RT_HDR) $(RT_CFG) | $(B)/setup.stamp
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(OMP_FLAGS) $(CJSON_CFLAGS) $(BLAS_CFLAGS) $(RT_CUDA_CFLAGS) -Iruntime -c $< -o $@
$(B)/obj/runtime/%.cu.o: runtime/%.cu $(RT_HDR) $(RT_CFG) | $(B)/setup.stamp
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -Iruntime -c $< -o $@
# libmodelrt.libs: the link line a program needs besides the library (read by tests/runtime).
$(RT_LIB): $(RT_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
	echo '$(RT_LIBS)' > $(B)/lib/libmodelrt.libs
$(B)/include/modelc/%: runtime/%
	@mkdir -p $(dir $@)
	cp $< $@

# ---------------------------------------------------------------- compiler
C_SRC   := $(wildcard compiler/*.c)
# rt_path.c (output-path policy, quoting) is shared with the runtime: plain C, no runtime state.
C_OBJ   := $(C_SRC:compiler/%.c=$(B)/obj/compiler/%.o) $(B)/obj/grammar/model.tab.o $(B)/obj/grammar/lex.yy.o \
           $(B)/obj/runtime/rt_path.o
MODELC  := $(B)/bin/modelc

$(B)/gen/model.tab.c $(B)/gen/model.tab.h: grammar/model.y | $(B)/setup.stamp
	@mkdir -p $(B)/gen
	bison -Wall -Werror --defines=$(B)/gen/model.tab.h -o $(B)/gen/model.tab.c $<
$(B)/gen/lex.yy.c $(B)/gen/lex.yy.h: grammar/model.l $(B)/gen/model.tab.h
	@mkdir -p $(B)/gen
	flex --header-file=$(B)/gen/lex.yy.h -o $(B)/gen/lex.yy.c $<
$(B)/obj/grammar/%.o: $(B)/gen/%.c $(B)/gen/model.tab.h $(B)/gen/lex.yy.h compiler/modelc.h compiler/ops.def
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Wno-unused-function -Icompiler -I$(B)/gen -c $< -o $@
$(B)/obj/compiler/%.o: compiler/%.c compiler/modelc.h compiler/ops.def runtime/rt_path.h $(B)/gen/model.tab.h $(B)/gen/lex.yy.h $(RT_CFG)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Icompiler -Iruntime -I$(B)/gen -DMODELC_DNNL=$(DNNL) -DMODELC_LINK_LIBS='"$(RT_LIBS)"' -DMODELC_EXTRA_CFLAGS='"$(OMP_FLAGS) $(FP_FLAGS)"' $(MODELC_CUDA_DEFS) -c $< -o $@
$(MODELC): $(C_OBJ) $(RT_LIB) $(RT_INC)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(C_OBJ) -o $@ -lm
	@$@ --list-ops > /dev/null || { rm -f $@; echo "the op table (compiler/ops.def) is inconsistent: see above"; exit 1; }

# ---------------------------------------------------------------- top-level targets
.PHONY: all setup demo test test-full test-all bench install clean FORCE
all: $(MODELC) $(RT_LIB) $(RT_INC)

# Installs missing system and Python packages once (tools/setup.sh is idempotent).
$(B)/setup.stamp: tools/setup.sh
	@mkdir -p $(B)
	bash tools/setup.sh
	@touch $@
setup: $(B)/setup.stamp

demo: all
	$(MAKE) -s -C examples/digits demo MODELC=$(abspath $(MODELC)) B=$(abspath $(B))

test: all   # make test SUITE=lit (or numeric,plan ...): only those suites
	B=$(B) PYTHON=$(PYTHON) SUITE=$(SUITE) bash tests/run_tests.sh
test-full: all   # make test-full SUITE=...: those suites in full
	B=$(B) PYTHON=$(PYTHON) SUITE=$(SUITE) FULL=1 bash tests/run_tests.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include/modelc
	install -m 755 $(MODELC) $(DESTDIR)$(PREFIX)/bin/modelc
	install -m 644 $(RT_LIB) $(DESTDIR)$(PREFIX)/lib/libmodelrt.a
	install -m 644 $(RT_PUB) $(DESTDIR)$(PREFIX)/include/modelc/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBS@|$(RT_LIBS)|' -e 's|@CFLAGS@|$(OMP_FLAGS) $(FP_FLAGS)|' tools/modelrt.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/modelrt.pc

clean:
	rm -rf build build-san

# ---------------------------------------------------------------- bench, gpu-check (not part of test)
# make bench: modelc vs PyTorch eager, torch.compile, ONNX Runtime and OpenVINO (f32 and bf16) on
#   the example models (bench/run.py); first installs the peers, pinned, into build/bench-venv
#   (bench/setup_venv.sh; offline, modelc is timed alone). BENCH=quick: three small cases, under
#   3 minutes. BENCH_ARGS, e.g. "--device cuda", "-k gpt2", "--threads 4". Writes
#   bench/results/DEVICE[-quick].{json,svg}. Then the training step (bench/train_bench.py: modelc
#   vs PyTorch eager and torch.compile; bench/results/train-cpu[-quick].json), then the scaling rows
#   (bench/scaling.py: 1 vs 2 CPU devices and MPI ranks, micro-batches; bench/results/scaling-cpu[-quick].json). make bench-venv:
#   only the install.
#   make bench-gemm: bench/gemm/run.sh (GEMM GFLOP/s of several BLAS libraries, issue 12).
#   make bench-own-sgemm: bench/gemm/own_sgemm.sh (an own AVX-512 GEMM against rt_matmul.c's oneDNN
#   primitive on MiniLM's and GPT-2's weight GEMMs; bench/gemm/RESULTS.md). OWN_SGEMM_ARGS.
#   make bench-conv: bench/conv/run.sh (ResNet-18's convolutions three ways, bench/conv/RESULTS.md).
# make gpu-check: every GPU check in one script (build with nvcc, runtime and numeric tests on
#   cuda vs cpu, examples, field cases B09/B12, bench); exits 2 at once without a GPU.
.PHONY: bench bench-venv bench-gemm bench-own-sgemm bench-conv gpu-check fuzz fuzz-build fuzz-graphs onnx-conformance
# make onnx-conformance: every ONNX backend node test (onnx.backend.test.case.node) imported by
#   tools/onnx2model.py, compiled, run on the CPU and compared (tools/onnx_conformance.py); one
#   table per op type and "N of M ONNX node tests pass, K unsupported, F failed". Compiled cases
#   are cached in build/onnx-conformance. ONNX_ARGS, e.g. "-k test_conv -v". make test runs a
#   quick subset (SUITE=onnx).
onnx-conformance: all
	nice -n 10 $(PYTHON) tools/onnx_conformance.py -j 2 --modelc $(abspath $(MODELC)) $(ONNX_ARGS)
BENCH ?=
bench-venv:
	bash bench/setup_venv.sh build/bench-venv
bench: all
	@bash bench/setup_venv.sh build/bench-venv || echo "bench: the peers are skipped (see above); modelc is timed alone"
	$(PYTHON) bench/run.py --modelc $(abspath $(MODELC)) $(if $(filter quick,$(BENCH)),--quick) $(BENCH_ARGS)
	MODELC=$(abspath $(MODELC)) $(PYTHON) bench/train_bench.py $(if $(filter quick,$(BENCH)),--quick)
	MODELC=$(abspath $(MODELC)) $(PYTHON) bench/scaling.py $(if $(filter quick,$(BENCH)),--quick)
bench-gemm:
	bash bench/gemm/run.sh $(GEMM_ARGS)
bench-own-sgemm:
	bash bench/gemm/own_sgemm.sh $(OWN_SGEMM_ARGS)
bench-conv: setup
	B=$(abspath $(B)) bash bench/conv/run.sh $(CONV_THREADS)

gpu-check:
	$(PYTHON) tools/gpu_check.py $(GPU_CHECK_ARGS)

# make cudasim: the runtime against the CUDA simulator of the tests (tests/cudasim/run.sh).
include tests/cudasim/cudasim.mk

# ---------------------------------------------------------------- fuzz (not part of test)
# make fuzz: builds tests/fuzz/fuzz_{model,safetensors,npy}.c with clang's libFuzzer, ASan and
#   UBSan into build/fuzz/, seeds build/fuzz/corpus/<target> (tests/fuzz/seed.py) and runs each
#   target for FUZZ_SECONDS (one at a time); crashes land in build/fuzz/crashes/<target>/.
#   FUZZ_TARGETS picks some ("model npy"), FUZZ_ARGS adds libFuzzer flags (-jobs=2 ...).
# make fuzz-graphs: the random-graph differential test (tests/plan/run.py) on FUZZ_GRAPHS
#   programs (default 10000) from seed FUZZ_GRAPH_START (default 1000, past make test's), built
#   with --no-cuda (nvcc is 90% of the time; make test's plan suite still builds the .cu files).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_GRAPHS  ?= 10000
FUZZ_GRAPH_START ?= 1000
FUZZ_TARGETS ?= model safetensors npy
FZ           := build/fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS  := $(CFLAGS_BASE) -O1 $(FUZZ_SAN) -fsanitize=fuzzer-no-link
FUZZ_C_OBJ   := $(patsubst compiler/%.c,$(FZ)/obj/compiler/%.o,$(C_SRC)) $(FZ)/obj/grammar/model.tab.o $(FZ)/obj/grammar/lex.yy.o \
                $(FZ)/obj/runtime/rt_path.o
FUZZ_RT_SRC  := $(filter-out runtime/rt_cuda.c,$(wildcard runtime/*.c))
FUZZ_RT_OBJ  := $(FUZZ_RT_SRC:runtime/%.c=$(FZ)/obj/runtime/%.o)
FUZZ_BINS    := $(FZ)/fuzz_model $(FZ)/fuzz_safetensors $(FZ)/fuzz_npy

# main.c without its main() (MODELC_NO_MAIN): the harness calls compile_source.
$(FZ)/obj/compiler/%.o: compiler/%.c compiler/modelc.h compiler/ops.def $(B)/gen/model.tab.h $(B)/gen/lex.yy.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Wno-unused-function -DMODELC_NO_MAIN -Icompiler -Iruntime -I$(B)/gen -c $< -o $@
$(FZ)/obj/grammar/%.o: $(B)/gen/%.c $(B)/gen/model.tab.h $(B)/gen/lex.yy.h compiler/modelc.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Wno-unused-function -Icompiler -I$(B)/gen -c $< -o $@
$(FZ)/obj/runtime/%.o: runtime/%.c $(RT_HDR) | $(B)/setup.stamp
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(CJSON_CFLAGS) $(BLAS_CFLAGS) -Iruntime -c $< -o $@
$(FZ)/fuzz_model: tests/fuzz/fuzz_model.c $(FUZZ_C_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -Icompiler -I$(B)/gen $^ -o $@ -lm
$(FZ)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_RT_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -Iruntime $^ -o $@ $(CJSON_LIBS) $(BLAS_LIBS) -lm -lpthread

fuzz-build: | $(B)/setup.stamp
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz: $(FUZZ_CC) not found; install Debian's clang package (apt-get install clang), or set FUZZ_CC"; exit 2; }
	$(MAKE) $(FUZZ_BINS)

fuzz: fuzz-build
	B=$(B) FZ=$(FZ) PYTHON=$(PYTHON) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_TARGETS="$(FUZZ_TARGETS)" \
	    FUZZ_ARGS="$(FUZZ_ARGS)" bash tests/fuzz/run.sh

fuzz-graphs: all
	MODELC=$(abspath $(MODELC)) $(PYTHON) tests/plan/run.py --no-cases --no-cuda --count $(FUZZ_GRAPHS) --start $(FUZZ_GRAPH_START) -j 2 -v
