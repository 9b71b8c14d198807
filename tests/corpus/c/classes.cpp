// Classes: constructors and destructors, virtual calls (vtables, typeinfo), multiple and
// virtual inheritance (thunks), pure virtual methods, static members, new/delete.
#include <cmath>

struct Shape {
    virtual ~Shape() = default;
    virtual double area() const = 0;
    virtual double perimeter() const { return 0.0; }
    static int live;
};
int Shape::live = 0;

struct Circle : Shape {
    double r;
    explicit Circle(double r) : r(r) { ++live; }
    ~Circle() override { --live; }
    double area() const override { return M_PI * r * r; }
    double perimeter() const override { return 2.0 * M_PI * r; }
};

struct Rect : Shape {
    double w, h;
    Rect(double w, double h) : w(w), h(h) { ++live; }
    ~Rect() override { --live; }
    double area() const override { return w * h; }
    double perimeter() const override { return 2.0 * (w + h); }
};

struct Named { virtual const char *name() const { return "named"; } virtual ~Named() = default; };
struct Square final : Rect, Named {
    explicit Square(double s) : Rect(s, s) {}
    const char *name() const override { return "square"; }
};

double total_area(Shape *const *shapes, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += shapes[i]->area() + 0.1 * shapes[i]->perimeter();
    return s;
}

double make_and_measure(double x) {
    Shape *shapes[3] = {new Circle(x), new Rect(x, 2 * x), new Square(x)};
    double a = total_area(shapes, 3);
    for (Shape *s : shapes) delete s;
    return a + Shape::live;
}

const char *name_of(const Named &n) { return n.name(); }

double via_dynamic_cast(Shape *s) {
    if (auto *c = dynamic_cast<Circle *>(s)) return c->r;
    if (auto *n = dynamic_cast<Named *>(s)) return n->name()[0];
    return -1.0;
}

struct Base { int b = 1; virtual int get() const { return b; } virtual ~Base() = default; };
struct Left : virtual Base { int l = 2; int get() const override { return b + l; } };
struct Right : virtual Base { int r = 3; };
struct Diamond : Left, Right { int d = 4; };
int diamond_sum() { Diamond d; Base &b = d; return b.get() + d.r + d.d; }

class Counter {
    int n_;
public:
    Counter() : n_(0) {}
    Counter &operator++() { ++n_; return *this; }
    int value() const { return n_; }
};
int count_to(int k) { Counter c; for (int i = 0; i < k; i++) ++c; return c.value(); }
