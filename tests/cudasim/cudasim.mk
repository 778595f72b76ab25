# tests/cudasim/cudasim.mk — the CUDA simulator and the runtime built against it (included by the
# Makefile; see tests/cudasim/include/cudasim.h). Test-only: nothing here is installed or linked
# into user programs, and none of it needs nvcc or a GPU.
#   make cudasim   $(B)/cudasim/libmodelrt-sim.a   runtime/*.c (as C, -DMRT_WITH_CUDA) and
#                                                  runtime/*.cu (as C++) against the simulator
#                  $(B)/cudasim/lib/libcudasim.so  the simulated device and runtime API
#                  $(B)/cudasim/lib/libcublas.so.13, libcublasLt.so.13   the cuBLAS stand-in
#                  $(B)/cudasim/lib/libnccl.so.2   the NCCL stand-in (nccl_sim.cc)
#                  $(B)/cudasim/libmodelrt-sim.libs   the link line a program needs besides the .a
#                  $(B)/cudasim/bin/modelc         modelc building executables for the simulator:
#                      NAME.cu by the host C++ compiler, linked with the simulated runtime (its
#                      home, $(B)/cudasim/{include/modelc,lib}, holds that runtime)
SIM         := $(B)/cudasim
SIM_INC     := tests/cudasim/include
SIM_HDR     := $(wildcard $(SIM_INC)/*.h)
SIM_LIBDIR  := $(SIM)/lib
SIM_CXXFLAGS := -std=c++17 -O2 -g -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare -fPIC
SIM_RT_OBJ  := $(patsubst runtime/%.c,$(SIM)/obj/%.o,$(filter-out runtime/rt_nocuda.c,$(wildcard runtime/*.c))) \
               $(patsubst runtime/%.cu,$(SIM)/obj/%.cu.o,$(wildcard runtime/*.cu))
SIM_RT_LIB  := $(SIM)/libmodelrt-sim.a
# DT_RPATH (not RUNPATH), so that dlopen("libcublas.so.13") (and "libnccl.so.2") finds the stand-in before any toolkit
# directory in LD_LIBRARY_PATH or the ld.so cache.
SIM_LINK    := -L$(abspath $(SIM_LIBDIR)) -lcudasim -Wl,--disable-new-dtags,-rpath,$(abspath $(SIM_LIBDIR)) \
               $(CJSON_LIBS) $(BLAS_LIBS) $(OMP_FLAGS) -lm -lpthread -ldl -lstdc++

$(SIM)/obj/%.o: runtime/%.c $(RT_HDR) $(SIM_HDR) | $(B)/setup.stamp
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(OMP_FLAGS) $(CJSON_CFLAGS) $(BLAS_CFLAGS) -DMRT_WITH_CUDA -I$(SIM_INC) -Iruntime -c $< -o $@
$(SIM)/obj/%.cu.o: runtime/%.cu $(RT_HDR) $(SIM_HDR) | $(B)/setup.stamp
	@mkdir -p $(dir $@)
	$(CXX) -x c++ $(SIM_CXXFLAGS) $(BLAS_CFLAGS) -I$(SIM_INC) -Iruntime -c $< -o $@
$(SIM_LIBDIR)/libcudasim.so: tests/cudasim/cudasim.cc $(SIM_HDR)
	@mkdir -p $(dir $@)
	$(CXX) $(SIM_CXXFLAGS) -fvisibility=hidden -shared -Wl,-soname,libcudasim.so -I$(SIM_INC) $< -o $@ -lpthread
$(SIM_LIBDIR)/libcublas.so.13: tests/cudasim/cublas_sim.cc $(SIM_HDR) $(SIM_LIBDIR)/libcudasim.so
	$(CXX) $(SIM_CXXFLAGS) -fvisibility=hidden -shared -Wl,-soname,libcublas.so.13 -I$(SIM_INC) $< -o $@ \
	    -L$(SIM_LIBDIR) -lcudasim -Wl,-rpath,'$$ORIGIN'
$(SIM_LIBDIR)/libnccl.so.2: tests/cudasim/nccl_sim.cc $(SIM_HDR) $(SIM_LIBDIR)/libcudasim.so
	$(CXX) $(SIM_CXXFLAGS) -fvisibility=hidden -shared -Wl,-soname,libnccl.so.2 -I$(SIM_INC) $< -o $@ \
	    -L$(SIM_LIBDIR) -lcudasim -Wl,-rpath,'$$ORIGIN'
$(SIM_LIBDIR)/libcublasLt.so.13: $(SIM_LIBDIR)/libcublas.so.13
	ln -sf libcublas.so.13 $@
$(SIM_RT_LIB): $(SIM_RT_OBJ)
	rm -f $@ && ar rcs $@ $^
$(SIM)/libmodelrt-sim.libs: tests/cudasim/cudasim.mk
	@mkdir -p $(dir $@)
	echo '$(SIM_LINK)' > $@


SIM_ABS_INC := $(abspath $(SIM_INC))
$(SIM)/obj/compiler/main.o: compiler/main.c compiler/modelc.h runtime/rt_path.h $(B)/gen/model.tab.h $(B)/gen/lex.yy.h tests/cudasim/cudasim.mk
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Icompiler -Iruntime -I$(B)/gen -DMODELC_DNNL=$(DNNL) -DMODELC_LINK_LIBS='"$(SIM_LINK)"' -DMODELC_EXTRA_CFLAGS='"$(OMP_FLAGS) $(FP_FLAGS)"' \
	    -DMODELC_NVCC='"$(abspath tests/cudasim/nvcc.sh)"' \
	    -DMODELC_CUDA_CFLAGS='"-DMRT_WITH_CUDA -I$(SIM_ABS_INC)"' -c $< -o $@
$(SIM)/bin/modelc: $(SIM)/obj/compiler/main.o $(filter-out $(B)/obj/compiler/main.o,$(C_OBJ))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $^ -o $@ -lm
$(SIM)/include/modelc/%: runtime/%
	@mkdir -p $(dir $@)
	cp $< $@
$(SIM_LIBDIR)/libmodelrt.a: $(SIM_RT_LIB)
	@mkdir -p $(dir $@)
	cp $< $@

# make cudasim-full: the cudasim suite with what make test leaves out (CUDASIM_FULL=1, see
# tests/cudasim/run.sh): every numeric case on the simulated GPU, and the kernel checks under the
# reverse and random thread schedules too.
.PHONY: cudasim cudasim-full
cudasim-full: all
	B=$(B) PYTHON=$(PYTHON) SUITE=cudasim FULL=1 bash tests/run_tests.sh
cudasim: $(SIM_RT_LIB) $(SIM)/libmodelrt-sim.libs $(SIM_LIBDIR)/libcudasim.so $(SIM_LIBDIR)/libcublas.so.13 \
         $(SIM_LIBDIR)/libcublasLt.so.13 $(SIM_LIBDIR)/libnccl.so.2 $(SIM)/bin/modelc $(RT_PUB:runtime/%=$(SIM)/include/modelc/%) \
         $(SIM_LIBDIR)/libmodelrt.a
