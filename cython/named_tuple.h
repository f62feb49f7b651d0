/* Shared by the compiled core (cython/_core.pxd) and engine (cython/_engine.pxd).
   A NamedTuple subclass instance holding the items of ``fields``: what tuple.__new__(cls,
   fields) does (tuple_subtype_new), without the method call and the temporary tuples. */
#ifndef QDROUTER_NAMED_TUPLE_H
#define QDROUTER_NAMED_TUPLE_H
#include <Python.h>

static inline PyObject *qdrouter_named_tuple(PyTypeObject *cls, PyObject *fields) {
    Py_ssize_t i, n = PyTuple_GET_SIZE(fields);
    PyObject *obj = cls->tp_alloc(cls, n);
    if (obj == NULL) return NULL;
    for (i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(fields, i);
        Py_INCREF(item);
        PyTuple_SET_ITEM(obj, i, item);
    }
    return obj;
}
#endif
