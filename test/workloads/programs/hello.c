/* hello is what the gcc case compiles and links (gcc's driver, cc1, as,
 * collect2 and ld: a tree of processes). Its unused variable is on purpose:
 * gcc -Wall warns on standard error, which is compared too. */
#include <stdio.h>

int main(void)
{
	int unused;
	unsigned long sum = 0;
	for (unsigned long i = 1; i <= 1000; i++)
		sum += i * i;
	printf("hello, sum of squares to 1000 is %lu\n", sum);
	return 0;
}
