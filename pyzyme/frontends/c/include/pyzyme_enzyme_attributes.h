/* Included by `pyzyme cc` before every C and C++ source (-include).
 *
 * Enzyme's clang plugin teaches clang its attributes; the clang pyzyme runs knows none of them
 * and would drop each with an "unknown attribute" warning. Spelled as these macros, the same
 * source text becomes clang's `annotate` attribute, which reaches the IR
 * (@llvm.global.annotations) where pyzyme reads it back
 * (pyzyme.frontends.c.registrations.find_registrations). Attributes of Enzyme that are not
 * defined here stay unknown to clang, and `pyzyme cc` refuses the program naming them. */
#ifndef PYZYME_ENZYME_ATTRIBUTES_H
#define PYZYME_ENZYME_ATTRIBUTES_H

/* A function whose calls carry no derivative; a global whose memory carries none. */
#define enzyme_inactive annotate("enzyme_inactive")
/* The same for a function, which Enzyme does not treat as a barrier to its analyses. */
#define enzyme_inactive_noblock annotate("enzyme_inactive_noblock")
/* A function differentiated as the C library function NAME ("log1p"). */
#define enzyme_function_like(NAME) annotate("enzyme_function_like:" NAME)
/* A global whose shadow (derivative) is the global VAR. */
#define enzyme_shadow(VAR) annotate("enzyme_shadow", &(VAR))
/* Hints for Enzyme's caching and type analysis; pyzyme finds the same facts itself. */
#define enzyme_no_escaping_allocation annotate("enzyme_no_escaping_allocation")
#define enzyme_notypeanalysis annotate("enzyme_notypeanalysis")

#endif
