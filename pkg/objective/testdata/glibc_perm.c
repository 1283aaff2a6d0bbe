/* LIBLINEAR's cross_validation shuffle, alone: glibc rand() without srand.
   glibc_perm_1000.txt is the output of: gcc -O2 glibc_perm.c && ./a.out 1000 */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	int l = atoi(argv[1]);
	int *perm = malloc(sizeof(int) * l);
	for (int i = 0; i < l; i++)
		perm[i] = i;
	for (int i = 0; i < l; i++) {
		int j = i + rand() % (l - i);
		int t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	for (int i = 0; i < l; i++)
		printf("%d\n", perm[i]);
	return 0;
}
