/* allocapi.c: jemalloc's mallocx family, mimalloc's mi_*, gperftools' tc_*
 * and C++ new/delete, routed through the GOTs of the modules that import
 * them. */
#ifndef HEAPLENS_ALLOCAPI_H
#define HEAPLENS_ALLOCAPI_H

#include <link.h>

void allocapi_resolve(void); /* the definitions, with dlsym: at load only */
void allocapi_started(void); /* the constructor's pass is over */
void allocapi_patch(const struct dl_phdr_info *info); /* a newly scanned module's entries */
void allocapi_route_all(void); /* attached: every module's, at load */

#endif
