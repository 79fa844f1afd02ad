export * from './src/httpsignature';
