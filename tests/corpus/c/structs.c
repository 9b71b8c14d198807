/* Structs by value (coerced to registers / byval / sret), by pointer, nested, arrays of them. */
#include <math.h>
#include <string.h>

typedef struct { double x, y; } vec2;
typedef struct { double x, y, z; } vec3;
typedef struct { float r, g; int tag; } small;
typedef struct { vec3 pos, vel; double mass; int id; } particle;
typedef struct { double m[3][3]; } mat3;

vec2 vec2_add(vec2 a, vec2 b) { return (vec2){a.x + b.x, a.y + b.y}; }
double vec2_norm(vec2 a) { return sqrt(a.x * a.x + a.y * a.y); }

vec3 cross(vec3 a, vec3 b) {
    vec3 c = {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
    return c;
}

small make_small(float r, int tag) { small s = {r, r * 2.0f, tag}; return s; }

mat3 mat3_mul(mat3 a, mat3 b) {
    mat3 c;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            c.m[i][j] = 0.0;
            for (int k = 0; k < 3; k++) c.m[i][j] += a.m[i][k] * b.m[k][j];
        }
    return c;
}

void particle_step(particle *p, double dt) {
    p->pos.x += dt * p->vel.x;
    p->pos.y += dt * p->vel.y;
    p->pos.z += dt * p->vel.z;
    p->vel.z -= dt * 9.81 / p->mass;
}

double kinetic_energy(const particle *ps, int n) {
    double e = 0.0;
    for (int i = 0; i < n; i++) {
        const vec3 *v = &ps[i].vel;
        e += 0.5 * ps[i].mass * (v->x * v->x + v->y * v->y + v->z * v->z);
    }
    return e;
}

void copy_particle(particle *dst, const particle *src) { memcpy(dst, src, sizeof *dst); }

particle reset(particle p) {
    particle q = p;
    memset(&q.vel, 0, sizeof q.vel);
    q.id = -1;
    return q;
}

struct node { struct node *next; double value; };

double list_sum(const struct node *n) {
    double s = 0.0;
    for (; n; n = n->next) s += n->value;
    return s;
}
