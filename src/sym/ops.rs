//! Arithmetic operator implementations for [`Poly`].

use std::iter::{Product, Sum};
use std::ops::{Add, AddAssign, Mul, MulAssign, Neg, Sub, SubAssign};

use super::poly::Poly;

fn add_owned(mut a: Poly, mut b: Poly) -> Poly {
    if a.len() < b.len() {
        std::mem::swap(&mut a, &mut b);
    }
    for (m, c) in b.into_map() {
        a.add_term(m, c);
    }
    a
}

fn add_ref(a: &mut Poly, b: &Poly) {
    for (m, c) in b.terms() {
        a.add_term_ref(m, c, false);
    }
}

fn sub_ref(a: &mut Poly, b: &Poly) {
    for (m, c) in b.terms() {
        a.add_term_ref(m, c, true);
    }
}

fn mul_ref(a: &Poly, b: &Poly) -> Poly {
    let mut out = Poly::zero();
    for (mb, cb) in b.terms() {
        out.add_scaled(a, cb, mb);
    }
    out
}

fn negate(mut a: Poly) -> Poly {
    for c in a.map_mut().values_mut() {
        *c = -&*c;
    }
    a
}

impl Add<Poly> for Poly {
    type Output = Poly;
    fn add(self, rhs: Poly) -> Poly {
        add_owned(self, rhs)
    }
}

impl Add<&Poly> for Poly {
    type Output = Poly;
    fn add(mut self, rhs: &Poly) -> Poly {
        add_ref(&mut self, rhs);
        self
    }
}

impl Add<Poly> for &Poly {
    type Output = Poly;
    fn add(self, mut rhs: Poly) -> Poly {
        add_ref(&mut rhs, self);
        rhs
    }
}

impl Add<&Poly> for &Poly {
    type Output = Poly;
    fn add(self, rhs: &Poly) -> Poly {
        self.clone() + rhs
    }
}

impl Sub<Poly> for Poly {
    type Output = Poly;
    fn sub(self, rhs: Poly) -> Poly {
        add_owned(self, negate(rhs))
    }
}

impl Sub<&Poly> for Poly {
    type Output = Poly;
    fn sub(mut self, rhs: &Poly) -> Poly {
        sub_ref(&mut self, rhs);
        self
    }
}

impl Sub<Poly> for &Poly {
    type Output = Poly;
    fn sub(self, rhs: Poly) -> Poly {
        add_owned(self.clone(), negate(rhs))
    }
}

impl Sub<&Poly> for &Poly {
    type Output = Poly;
    fn sub(self, rhs: &Poly) -> Poly {
        self.clone() - rhs
    }
}

impl Mul<Poly> for Poly {
    type Output = Poly;
    fn mul(self, rhs: Poly) -> Poly {
        mul_ref(&self, &rhs)
    }
}

impl Mul<&Poly> for Poly {
    type Output = Poly;
    fn mul(self, rhs: &Poly) -> Poly {
        mul_ref(&self, rhs)
    }
}

impl Mul<Poly> for &Poly {
    type Output = Poly;
    fn mul(self, rhs: Poly) -> Poly {
        mul_ref(self, &rhs)
    }
}

impl Mul<&Poly> for &Poly {
    type Output = Poly;
    fn mul(self, rhs: &Poly) -> Poly {
        mul_ref(self, rhs)
    }
}

impl Neg for Poly {
    type Output = Poly;
    fn neg(self) -> Poly {
        negate(self)
    }
}

impl Neg for &Poly {
    type Output = Poly;
    fn neg(self) -> Poly {
        negate(self.clone())
    }
}

impl AddAssign<Poly> for Poly {
    fn add_assign(&mut self, rhs: Poly) {
        *self = add_owned(std::mem::take(self), rhs);
    }
}

impl AddAssign<&Poly> for Poly {
    fn add_assign(&mut self, rhs: &Poly) {
        add_ref(self, rhs);
    }
}

impl SubAssign<Poly> for Poly {
    fn sub_assign(&mut self, rhs: Poly) {
        *self = add_owned(std::mem::take(self), negate(rhs));
    }
}

impl SubAssign<&Poly> for Poly {
    fn sub_assign(&mut self, rhs: &Poly) {
        sub_ref(self, rhs);
    }
}

impl MulAssign<Poly> for Poly {
    fn mul_assign(&mut self, rhs: Poly) {
        *self = mul_ref(self, &rhs);
    }
}

impl MulAssign<&Poly> for Poly {
    fn mul_assign(&mut self, rhs: &Poly) {
        *self = mul_ref(self, rhs);
    }
}

impl Sum for Poly {
    fn sum<I: Iterator<Item = Poly>>(iter: I) -> Poly {
        iter.fold(Poly::zero(), |acc, p| acc + p)
    }
}

impl<'a> Sum<&'a Poly> for Poly {
    fn sum<I: Iterator<Item = &'a Poly>>(iter: I) -> Poly {
        iter.fold(Poly::zero(), |acc, p| acc + p)
    }
}

impl Product for Poly {
    fn product<I: Iterator<Item = Poly>>(iter: I) -> Poly {
        iter.fold(Poly::one(), |acc, p| acc * p)
    }
}

impl<'a> Product<&'a Poly> for Poly {
    fn product<I: Iterator<Item = &'a Poly>>(iter: I) -> Poly {
        iter.fold(Poly::one(), |acc, p| acc * p)
    }
}
