//! A small dense tensor of `f64`, row-major: just what the reference interpreter needs.

#[derive(Debug, Clone, PartialEq)]
pub struct T {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl T {
    pub fn zeros(shape: &[usize]) -> T {
        T {
            shape: shape.to_vec(),
            data: vec![0.0; shape.iter().product()],
        }
    }

    pub fn from_fn(shape: &[usize], mut f: impl FnMut(&[usize]) -> f64) -> T {
        let mut t = T::zeros(shape);
        let mut idx = vec![0; shape.len()];
        for k in 0..t.data.len() {
            t.data[k] = f(&idx);
            bump(&mut idx, shape);
        }
        t
    }

    fn offset(&self, idx: &[usize]) -> usize {
        idx.iter()
            .zip(&self.shape)
            .fold(0, |acc, (i, n)| acc * n + i)
    }

    pub fn get(&self, idx: &[usize]) -> f64 {
        self.data[self.offset(idx)]
    }

    pub fn at(&mut self, idx: &[usize]) -> &mut f64 {
        let o = self.offset(idx);
        &mut self.data[o]
    }

    pub fn reshape(&self, shape: &[usize]) -> Result<T, String> {
        if shape.iter().product::<usize>() != self.data.len() {
            return Err(format!("reshape {:?} to {shape:?}", self.shape));
        }
        Ok(T {
            shape: shape.to_vec(),
            data: self.data.clone(),
        })
    }

    /// Block `r` of `parts` equal blocks along `axis`.
    pub fn chunk(&self, axis: usize, parts: usize, r: usize) -> Result<T, String> {
        let n = *self.shape.get(axis).ok_or("chunk of a missing dimension")?;
        if n % parts != 0 {
            return Err(format!("{n} rows do not split into {parts} blocks"));
        }
        self.slice(axis, r * n / parts, n / parts)
    }

    /// Rows `start..start + len` along `axis`.
    pub fn slice(&self, axis: usize, start: usize, len: usize) -> Result<T, String> {
        if start + len > self.shape[axis] {
            return Err(format!("slice {start}+{len} of {:?} on {axis}", self.shape));
        }
        let mut shape = self.shape.clone();
        shape[axis] = len;
        Ok(T::from_fn(&shape, |idx| {
            let mut i = idx.to_vec();
            i[axis] += start;
            self.get(&i)
        }))
    }

    pub fn concat(parts: &[T], axis: usize) -> Result<T, String> {
        let first = parts.first().ok_or("concat of nothing")?;
        let mut shape = first.shape.clone();
        shape[axis] = parts.iter().map(|p| p.shape[axis]).sum();
        for p in parts {
            let mut s = p.shape.clone();
            s[axis] = shape[axis];
            if s != shape {
                return Err(format!("concat of {:?} and {:?}", first.shape, p.shape));
            }
        }
        Ok(T::from_fn(&shape, |idx| {
            let mut i = idx.to_vec();
            for p in parts {
                if i[axis] < p.shape[axis] {
                    return p.get(&i);
                }
                i[axis] -= p.shape[axis];
            }
            f64::NAN
        }))
    }

    pub fn zip(&self, other: &T, f: impl Fn(f64, f64) -> f64) -> Result<T, String> {
        if self.shape != other.shape {
            return Err(format!("{:?} against {:?}", self.shape, other.shape));
        }
        Ok(T {
            shape: self.shape.clone(),
            data: self
                .data
                .iter()
                .zip(&other.data)
                .map(|(a, b)| f(*a, *b))
                .collect(),
        })
    }

    pub fn map(&self, f: impl Fn(f64) -> f64) -> T {
        T {
            shape: self.shape.clone(),
            data: self.data.iter().map(|a| f(*a)).collect(),
        }
    }

    pub fn close(&self, other: &T, tol: f64) -> bool {
        self.shape == other.shape
            && self
                .data
                .iter()
                .zip(&other.data)
                .all(|(a, b)| (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs())))
    }
}

/// Advances a row-major multi-index.
pub fn bump(idx: &mut [usize], shape: &[usize]) {
    for d in (0..idx.len()).rev() {
        idx[d] += 1;
        if idx[d] < shape[d] {
            return;
        }
        idx[d] = 0;
    }
}

/// A deterministic pseudo-random stream (xorshift), for test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [-1, 1).
    pub fn float(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}
