/* enzyme/fixed_point.h as pyzyme provides it to `pyzyme cc`: fixed-point iterations.
 *
 * Written for pyzyme from the interface Enzyme documents (the names of the entry point and
 * of the markers are Enzyme's, so programs written for it build unchanged; the rest is
 * pyzyme's own).
 *
 *     __enzyme_fixed_point((void *)step, enzyme_fp_state, ptr, bytes, ...
 *                          [enzyme_fp_reduction, r,]      (a double; default 1e-12)
 *                          [enzyme_fp_max_iters, n,]      (an integer; default 1000, 0: none)
 *                          [enzyme_fp_control, control,]
 *                          [enzyme_checkpoint_region, ptr, bytes,]...
 *                          args...);
 *
 * runs `int64_t i = 0; while (step(i++, args...));`: the step maps the state (the memory
 * marked enzyme_fp_state, doubles or floats) to a new one and says whether to go on.
 *
 * Derivatives do not go through the iterations: they are those of the fixed point u = F(u, p)
 * the loop converged to. Reverse mode keeps one snapshot of the state the loop ends in (and
 * of the regions, and of the globals the step uses that the program writes) and iterates the
 * adjoint of one step taken there, w = ubar + F_u^T w, then adds F_p^T w to the parameters'
 * adjoints (Christianson, 1994). The state's adjoint is zero afterwards (the fixed point does
 * not depend on the initial guess), and the snapshot's memory is as the reverse pass found
 * it. Forward mode runs the loop, then iterates the tangent of one step at the state it ended
 * in, s = F_u s + F_p pdot from s = 0; the state is left as the loop left it.
 *
 * When the derivative's iteration stops: its measure is the squared 2-norm of each round's
 * update of the state's adjoint (forward mode: of the change of its tangent). The rounds stop
 * once it falls below r times its value after the first round, or once it grows after the
 * fifth, or after n rounds. A control function
 *
 *     int control(double *cumul, double *reduction);
 *
 * decides instead (Tapenade's protocol): it is called with *cumul = -1 before the first round
 * and with the measure after each, and returns whether to run another; n still bounds them.
 *
 * A loop may instead be marked from inside, in its body:
 *
 *     while (...) {
 *       __enzyme_set_fixed_point(reduction, max_iters, control, state, bytes, ...);
 *       ...
 *     }
 *
 * (a negative reduction or max_iters, or a null control, for the defaults; the arguments are
 * computed before the loop, and may be passed by address, as Fortran does). `pyzyme cc`
 * outlines one iteration, up to the loop's next test, as the step, and the local variables the
 * loop shares with the code around it (an error, a counter) as regions. The loop must leave
 * only by its test, at its start (while, for) or its end (do-while); pyzyme refuses others at
 * the marker's line. The derivative's rounds run the body even where the loop's test would
 * stop it, as it does at the fixed point.
 */
#ifndef ENZYME_FIXED_POINT_H
#define ENZYME_FIXED_POINT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

extern int enzyme_fp_state;
extern int enzyme_fp_reduction;
extern int enzyme_fp_max_iters;
extern int enzyme_fp_control;
extern int enzyme_checkpoint_region;

void __enzyme_fixed_point(void *step, ...);
void __enzyme_set_fixed_point(double reduction, int64_t max_iters, void *control, ...);

#ifdef __cplusplus
}
#endif

#endif /* ENZYME_FIXED_POINT_H */
