// tk_cascade_isa_end.h: ends one instruction-set path of tk_cascade.c,
// undefining the vector macros its tk_cascade_body.h instances used, so the
// next path can define its own.
#undef CASC_ATTR
#undef VT
#undef VL
#undef VLOAD
#undef VSTORE
#undef VZERO
#undef VSET1
#undef VADD
#undef VSUB
#undef VMUL
#undef VMAX
#undef VEXP
#undef VFMA
#undef KB
#undef DB
