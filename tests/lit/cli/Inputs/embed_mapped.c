/* embed_mapped.c — the embedding API's device map: split_create_mapped moves the region pinned
 * to cpu:1 onto cpu:4 (as map_location would), and the run gives the same result. */
#include <stdio.h>
#include <string.h>

#include "split.h"

int main(void) {
    split *m = NULL;
    if (split_create_mapped(&m, "cpu", "cpu:1=cpu:4") != MRT_OK) {
        fprintf(stderr, "create: %s\n", mrt_last_error());
        return 1;
    }
    char d[32];
    printf("slot 1 runs on %s\n", mrt_device_str(m->dev[1], d, sizeof d));
    const float x[4] = {1, -2, 3, -4};
    float y[4];
    if (split_load_weights(m, NULL) != MRT_OK || split_run(m, 1, x, y) != MRT_OK) {
        fprintf(stderr, "run: %s\n", mrt_last_error());
        return 1;
    }
    printf("y = %g %g %g %g\n", y[0], y[1], y[2], y[3]);
    split_destroy(m);
    /* NULL handles: an error (or cpu:0 for the device), never a crash. */
    if (split_run(NULL, 1, x, y) == MRT_OK) return 1;
    printf("error: %s\n", mrt_last_error());
    if (split_load_weights(NULL, NULL) == MRT_OK) return 1;
    printf("error: %s\n", mrt_last_error());
    printf("NULL runs on %s\n", mrt_device_str(split_device(NULL), d, sizeof d));
    /* A bad map is an error from create, and *m stays NULL. */
    if (split_create_mapped(&m, "cpu", "cpu:1") == MRT_OK || m) return 1;
    printf("error: %s\n", mrt_last_error());
    return 0;
}
