! One sgemm or dgemm call from Fortran, as a Fortran program makes it, for
! tests/test_c_consumers.py: the test writes the case on stdin and the operands
! (column-major, with their leading dimensions) to in.bin; the program reads them,
! calls the BLAS routine and writes C back to out.bin for the test to compare
! against its reference.  Default integers are the 32-bit ones of the LP64 BLAS
! interface libautotune exports.
program gemm_check
  implicit none
  character(len=1) :: prec, ta, tb
  integer :: m, n, k, lda, ldb, ldc, acols, bcols
  double precision :: alpha, beta
  real, allocatable :: sa(:, :), sb(:, :), sc(:, :)
  double precision, allocatable :: da(:, :), db(:, :), dc(:, :)
  external :: sgemm, dgemm

  read (*, *) prec, ta, tb, m, n, k, lda, ldb, ldc, alpha, beta
  ! op(A) is m x k: A itself is m x k, or k x m when transposed; likewise B.
  acols = k
  if (ta /= 'N' .and. ta /= 'n') acols = m
  bcols = n
  if (tb /= 'N' .and. tb /= 'n') bcols = k
  open (10, file='in.bin', access='stream', form='unformatted', status='old', action='read')
  open (11, file='out.bin', access='stream', form='unformatted', status='replace', action='write')
  if (prec == 'S') then
    allocate (sa(lda, acols), sb(ldb, bcols), sc(ldc, n))
    read (10) sa, sb, sc
    call sgemm(ta, tb, m, n, k, real(alpha), sa, lda, sb, ldb, real(beta), sc, ldc)
    write (11) sc
  else
    allocate (da(lda, acols), db(ldb, bcols), dc(ldc, n))
    read (10) da, db, dc
    call dgemm(ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc)
    write (11) dc
  end if
  close (10)
  close (11)
end program gemm_check
