/*
 * native: a C extension module the sample project's tests import, built by
 * the test for each Python (cc -shared -fopenmp with the interpreter's
 * headers). hold() leaks in C; omp_hold() leaks from the worker threads of
 * an OpenMP region, which heaplens charges to the Python code that ran it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

static void *volatile kept[4096];
static int nkept;

static void keep(void *p)
{
#pragma omp critical
	kept[nkept++ % 4096] = p;
}

/* hold(n, count): allocates n bytes in count blocks and keeps them. */
__attribute__((noinline)) static void native_hold(size_t n, int count)
{
	for (int i = 0; i < count; i++) {
		char *p = malloc(n / (size_t)count);
		memset(p, 1, 64);
		keep(p);
	}
}

/* omp_hold(n, threads): each OpenMP thread allocates n bytes in 64 KiB blocks and keeps them. */
__attribute__((noinline)) static void native_omp_hold(size_t n, int threads)
{
#pragma omp parallel num_threads(threads)
	for (size_t done = 0; done < n; done += 64 << 10) {
		char *p = malloc(64 << 10);
		memset(p, 2, 64);
		keep(p);
	}
}

static PyObject *hold(PyObject *self, PyObject *args)
{
	Py_ssize_t n;
	int count;
	(void)self;
	if (!PyArg_ParseTuple(args, "ni", &n, &count))
		return NULL;
	native_hold((size_t)n, count);
	Py_RETURN_NONE;
}

static PyObject *omp_hold(PyObject *self, PyObject *args)
{
	Py_ssize_t n;
	int threads;
	(void)self;
	if (!PyArg_ParseTuple(args, "ni", &n, &threads))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	native_omp_hold((size_t)n, threads);
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{"hold", hold, METH_VARARGS, "Allocate n bytes in count blocks in C and keep them."},
	{"omp_hold", omp_hold, METH_VARARGS, "Each of threads OpenMP threads allocates n bytes and keeps them."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "native", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_native(void) { return PyModule_Create(&module); }
