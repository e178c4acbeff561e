/* The CBLAS interface of the host BLAS the build chose (the Makefile's BLAS): MKL names
 * its header mkl_cblas.h, the others cblas.h. Sizes go as int (LP64 builds only). */
#ifndef BLOB_HOST_CBLAS_H
#define BLOB_HOST_CBLAS_H

#ifdef BLOB_BLAS_MKL
#include <mkl_cblas.h>
#else
#include <cblas.h>
#endif

#endif
