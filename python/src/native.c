/* gckpt._native: the planner's JSON API (include/gckpt/planner/plan_api.h) for Python.
 * One function, call(request: str) -> str; the GIL is released while the planner works
 * (the package serialises calls: the data folder is process-wide). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "gckpt/planner/plan_api.h"
#include "gckpt/util/util.h"

static PyObject *native_call(PyObject *self, PyObject *args)
{
    (void)self;
    const char *request;
    if (!PyArg_ParseTuple(args, "s:call", &request)) return NULL;
    char *copy = strdup(request); /* the str's buffer is not ours without the GIL */
    if (!copy) return PyErr_NoMemory();
    char *answer;
    Py_BEGIN_ALLOW_THREADS
    answer = gckpt_api_call(copy);
    Py_END_ALLOW_THREADS
    free(copy);
    if (!answer) return PyErr_NoMemory();
    PyObject *out = PyUnicode_DecodeUTF8(answer, (Py_ssize_t)strlen(answer), "replace");
    gckpt_api_free(answer);
    return out;
}

static PyMethodDef methods[] = {
    {"call", native_call, METH_VARARGS, "call(request: str) -> str: the planner's JSON API"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "gckpt's C planner", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddStringConstant(m, "VERSION", GCKPT_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
