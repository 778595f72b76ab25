# modelc — build, demo, test, bench.
#   make demo        set up, build, and run the digits example
#   make test        set up, build, and run every test; ends with "N passed, N failed"
#   make SANITIZE=1 test   the same under AddressSanitizer + UBSan
#   make NVCC= ...   force a CPU-only build (CUDA is not required for anything CPU)
#   make install PREFIX=/usr/local
CC       ?= cc
PYTHON   ?= python3
PREFIX   ?= /usr/local
B        := build
NVCC     ?= $(shell command -v nvcc 2>/dev/null)

CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare
ifeq ($(SANITIZE),1)
  SAN      := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  B        := build-san
  export MODELC_CFLAGS := $(SAN)
  export ASAN_OPTIONS := detect_leaks=1
  export UBSAN_OPTIONS := print_stacktrace=1:halt_on_error=1
endif
CFLAGS_ALL := $(CFLAGS_BASE) $(SAN) $(CFLAGS)
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
CJSON_CFLAGS := $(shell pkg-config --cflags libcjson 2>/dev/null || echo -I/usr/include/cjson)
CJSON_LIBS   := $(shell pkg-config --libs libcjson 2>/dev/null || echo -lcjson)
RT_LIBS     := $(CJSON_LIBS) $(BLAS_LIBS) -lm -lpthread

# ---------------------------------------------------------------- runtime
RT_SRC  := $(wildcard runtime/*.c)
RT_HDR  := $(wildcard runtime/*.h)
RT_PUB  := runtime/modelrt.h runtime/mrt_kernels.h   # installed; rt_*.h are internal
RT_OBJ  := $(RT_SRC:runtime/%.c=$(B)/obj/runtime/%.o)
RT_LIB  := $(B)/lib/libmodelrt.a
RT_INC  := $(RT_PUB:runtime/%=$(B)/include/modelc/%)

$(B)/obj/runtime/%.o: runtime/%.c $(RT_HDR) | $(B)/setup.stamp
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(CJSON_CFLAGS) -Iruntime -c $< -o $@
$(RT_LIB): $(RT_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(B)/include/modelc/%: runtime/%
	@mkdir -p $(dir $@)
	cp $< $@

# ---------------------------------------------------------------- compiler
C_SRC   := $(wildcard compiler/*.c)
C_OBJ   := $(C_SRC:compiler/%.c=$(B)/obj/compiler/%.o) $(B)/obj/grammar/model.tab.o $(B)/obj/grammar/lex.yy.o
MODELC  := $(B)/bin/modelc

$(B)/gen/model.tab.c $(B)/gen/model.tab.h: grammar/model.y | $(B)/setup.stamp
	@mkdir -p $(B)/gen
	bison -Wall -Werror --defines=$(B)/gen/model.tab.h -o $(B)/gen/model.tab.c $<
$(B)/gen/lex.yy.c $(B)/gen/lex.yy.h: grammar/model.l $(B)/gen/model.tab.h
	@mkdir -p $(B)/gen
	flex --header-file=$(B)/gen/lex.yy.h -o $(B)/gen/lex.yy.c $<
$(B)/obj/grammar/%.o: $(B)/gen/%.c $(B)/gen/model.tab.h $(B)/gen/lex.yy.h compiler/modelc.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Wno-unused-function -Icompiler -I$(B)/gen -c $< -o $@
$(B)/obj/compiler/%.o: compiler/%.c compiler/modelc.h $(B)/gen/model.tab.h $(B)/gen/lex.yy.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Icompiler -I$(B)/gen -DMODELC_LINK_LIBS='"$(RT_LIBS)"' -DMODELC_EXTRA_CFLAGS='"$(BLAS_CFLAGS)"' -c $< -o $@
$(MODELC): $(C_OBJ) $(RT_LIB) $(RT_INC)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(C_OBJ) -o $@ -lm

# ---------------------------------------------------------------- top-level targets
.PHONY: all setup demo test test-all bench install clean
all: $(MODELC) $(RT_LIB) $(RT_INC)

# Installs missing system and Python packages once (tools/setup.sh is idempotent).
$(B)/setup.stamp: tools/setup.sh
	@mkdir -p $(B)
	bash tools/setup.sh
	@touch $@
setup: $(B)/setup.stamp

demo: all
	$(MAKE) -s -C examples/digits demo MODELC=$(abspath $(MODELC)) B=$(abspath $(B))

test: all
	B=$(B) PYTHON=$(PYTHON) bash tests/run_tests.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include/modelc
	install -m 755 $(MODELC) $(DESTDIR)$(PREFIX)/bin/modelc
	install -m 644 $(RT_LIB) $(DESTDIR)$(PREFIX)/lib/libmodelrt.a
	install -m 644 $(RT_PUB) $(DESTDIR)$(PREFIX)/include/modelc/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBS@|$(RT_LIBS)|' tools/modelrt.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/modelrt.pc

clean:
	rm -rf build build-san
